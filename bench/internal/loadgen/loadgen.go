// Package loadgen drives an HTTP/1.1 server over raw keep-alive TCP
// connections with pre-built requests (package httpwire), in one of the
// benchmark's workloads, either closed-loop (each connection sends its next
// request when the previous answer arrived) or at a fixed rate.
package loadgen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/bench/internal/httpwire"
	"github.com/idemkit/idemkit/bench/internal/stats"
)

// Workload says which key each request carries.
type Workload int

// The workloads.
const (
	// First: a new key on every request.
	First Workload = iota + 1
	// Replay: every request carries one key, completed before the run.
	Replay
	// Mix: 90% new keys, 10% retries of keys the same connection completed.
	Mix
	// Conflict: as many requests per key as there are connections, sent at
	// about the same time, so most arrive while the key is held.
	Conflict
	// NoKey: no key header at all.
	NoKey
)

var workloadNames = map[Workload]string{First: "First", Replay: "Replay", Mix: "Mix", Conflict: "Conflict", NoKey: "NoKey"}

// String returns the workload's name.
func (w Workload) String() string {
	if n, ok := workloadNames[w]; ok {
		return n
	}
	return fmt.Sprintf("Workload(%d)", int(w))
}

// ParseWorkload returns the workload named s (as String returns it).
func ParseWorkload(s string) (Workload, error) {
	for w, n := range workloadNames {
		if n == s {
			return w, nil
		}
	}
	return 0, fmt.Errorf("unknown workload %q", s)
}

// Config describes one run.
type Config struct {
	Addr      string // host:port on loopback
	Path      string
	KeyHeader string // "Idempotency-Key"
	Body      []byte
	Workload  Workload
	Conns     int
	// Warmup runs before the measured window; its requests are not counted.
	Warmup time.Duration
	// Duration bounds the measured window; the run also ends when ctx is
	// done or MaxRequests have been measured.
	Duration    time.Duration
	MaxRequests int
	// Rate, if positive, sends requests at this many per second whatever
	// the server's speed (open loop) and measures each latency from the
	// moment the request was due, so a stalled server shows as the delay
	// it caused rather than as fewer samples. Zero: closed loop.
	Rate float64
	// Prefix makes this run's keys distinct from every other run's.
	Prefix uint32
	// OnWindow, if set, is called as the measured window opens and closes
	// (to read the server's allocation counters).
	OnWindow func(open bool)
}

// Result is one run's measurement.
type Result struct {
	Requests int           // responses in the measured window
	Elapsed  time.Duration // length of the measured window
	RPS      float64
	Latency  stats.Latencies
	Status   map[int]int // status code counts in the window
	Replayed int         // responses with Idempotent-Replayed: true
	Errors   int         // connection or protocol errors (the connection is redialled)
	// Late counts fixed-rate requests sent more than a second after they
	// were due, or not sent at all before the window closed (every
	// connection was busy).
	Late int
}

// sample is one response in the measured window.
type sample struct {
	lat      time.Duration
	status   int
	replayed bool
}

type conn struct {
	id      uint16
	c       net.Conn
	br      *bufio.Reader
	req     *httpwire.Request
	key     []byte
	seq     uint64 // new keys this connection sent
	rng     *rand.Rand
	samples []sample
	errors  int
	resp    httpwire.Response
}

// Run performs one run against cfg.Addr. It primes what the workload needs
// (Replay's completed key), runs the warm-up and the measured window, and
// closes its connections.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Conns <= 0 || cfg.Duration <= 0 {
		return Result{}, errors.New("loadgen: Conns and Duration must be positive")
	}
	keyHeader := cfg.KeyHeader
	if cfg.Workload == NoKey {
		keyHeader = ""
	}
	tmpl, err := httpwire.NewRequest(cfg.Addr, cfg.Path, keyHeader, cfg.Body)
	if err != nil {
		return Result{}, err
	}
	conns := make([]*conn, cfg.Conns)
	defer func() {
		for _, c := range conns {
			if c != nil && c.c != nil {
				c.c.Close()
			}
		}
	}()
	for i := range conns {
		c := &conn{id: uint16(i), req: tmpl.Clone(), key: make([]byte, httpwire.KeyLen),
			rng: rand.New(rand.NewPCG(uint64(cfg.Prefix), uint64(i)))}
		if err := c.dial(cfg.Addr); err != nil {
			return Result{}, err
		}
		conns[i] = c
	}
	g := &gen{cfg: cfg}
	if cfg.Workload == Replay {
		// Complete the shared key once; every measured request replays it.
		c := conns[0]
		g.setKey(c)
		if status, err := c.roundTrip(time.Now().Add(maxWait)); err != nil {
			return Result{}, fmt.Errorf("loadgen: priming the replayed key: %w", err)
		} else if status >= 300 {
			return Result{}, fmt.Errorf("loadgen: priming the replayed key: status %d", status)
		}
	}

	start := time.Now()
	g.open = start.Add(cfg.Warmup)
	g.end = g.open.Add(cfg.Duration)
	runCtx, cancel := context.WithDeadline(ctx, g.end)
	defer cancel()
	windowDone := make(chan struct{})
	if cfg.OnWindow != nil {
		go func() {
			defer close(windowDone)
			t := time.NewTimer(time.Until(g.open))
			select {
			case <-t.C:
				cfg.OnWindow(true)
			case <-runCtx.Done():
				t.Stop()
				cfg.OnWindow(true) // keep the calls paired
			}
			<-runCtx.Done()
			cfg.OnWindow(false)
		}()
	} else {
		close(windowDone)
	}

	var wg sync.WaitGroup
	if cfg.Rate > 0 {
		g.runFixedRate(runCtx, conns, &wg)
	} else {
		for _, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g.closedLoop(runCtx, c)
			}()
		}
		wg.Wait()
	}
	cancel()
	<-windowDone

	res := Result{Status: map[int]int{}, Late: int(g.late.Load())}
	var lats []time.Duration
	last := g.open
	for _, c := range conns {
		res.Errors += c.errors
		for _, s := range c.samples {
			lats = append(lats, s.lat)
			res.Status[s.status]++
			if s.replayed {
				res.Replayed++
			}
		}
	}
	if t := g.lastDone.Load(); t > 0 {
		last = time.Unix(0, t)
	}
	res.Requests = len(lats)
	res.Elapsed = min(last.Sub(g.open), cfg.Duration)
	if cfg.Rate > 0 || res.Elapsed <= 0 {
		res.Elapsed = cfg.Duration
	}
	if res.Requests > 0 {
		res.RPS = float64(res.Requests) / res.Elapsed.Seconds()
	}
	res.Latency = stats.Summarize(lats)
	if res.Requests == 0 {
		return res, fmt.Errorf("loadgen: no response in the measured window (%d errors)", res.Errors)
	}
	return res, nil
}

// gen holds what the connections of a run share.
type gen struct {
	cfg       Config
	open, end time.Time
	measured  atomic.Int64 // samples taken, against MaxRequests
	conflict  atomic.Uint64
	lastDone  atomic.Int64 // unix nanos of the last measured response
	late      atomic.Int64
}

// setKey writes the key of c's next request, per workload.
func (g *gen) setKey(c *conn) {
	switch g.cfg.Workload {
	case NoKey:
		return
	case Replay:
		httpwire.FormatKey(c.key, g.cfg.Prefix, 0xffff, 0)
	case Conflict:
		// Consecutive requests of all connections share a key, n at a time.
		n := g.conflict.Add(1) - 1
		httpwire.FormatKey(c.key, g.cfg.Prefix, 0xfffe, n/uint64(g.cfg.Conns))
	case Mix:
		// Every tenth request retries a key this connection completed.
		if c.seq > 0 && c.rng.IntN(10) == 0 {
			httpwire.FormatKey(c.key, g.cfg.Prefix, c.id, c.rng.Uint64N(c.seq))
			break
		}
		fallthrough
	default: // First
		httpwire.FormatKey(c.key, g.cfg.Prefix, c.id, c.seq)
		c.seq++
	}
	c.req.SetKey(c.key)
}

func (c *conn) dial(addr string) error {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return fmt.Errorf("loadgen: %w", err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	c.c, c.br = nc, bufio.NewReaderSize(nc, 16<<10)
	return nil
}

// roundTrip sends c's request and reads the answer, giving up at deadline.
func (c *conn) roundTrip(deadline time.Time) (int, error) {
	c.c.SetDeadline(deadline)
	if _, err := c.c.Write(c.req.Bytes()); err != nil {
		return 0, err
	}
	if err := httpwire.ReadResponse(c.br, &c.resp); err != nil {
		return 0, err
	}
	if c.resp.Close {
		return c.resp.Status, errServerClosed
	}
	return c.resp.Status, nil
}

var errServerClosed = errors.New("server closed the connection")

const (
	// maxWait bounds the wait for one answer.
	maxWait = 30 * time.Second
	// grace is how long past the window's end an answer is awaited.
	grace = 2 * time.Second
)

// exchange sends one request due at due and records it if it is in the
// measured window. It reports false when the connection cannot go on.
func (g *gen) exchange(c *conn, due time.Time) bool {
	g.setKey(c)
	// A server that stops answering holds the run up a moment past its
	// window at most, whatever the answer's own wait.
	deadline := time.Now().Add(maxWait)
	if d := g.end.Add(grace); d.Before(deadline) {
		deadline = d
	}
	status, err := c.roundTrip(deadline)
	done := time.Now()
	if status != 0 && !due.Before(g.open) && !due.After(g.end) {
		if max := g.cfg.MaxRequests; max <= 0 || g.measured.Add(1) <= int64(max) {
			c.samples = append(c.samples, sample{lat: done.Sub(due), status: status, replayed: c.resp.Replayed})
			g.lastDone.Store(done.UnixNano())
		}
	}
	if err != nil {
		if !errors.Is(err, errServerClosed) {
			c.errors++
		}
		c.c.Close()
		if time.Now().After(g.end) || c.dial(g.cfg.Addr) != nil {
			return false
		}
	}
	return true
}

func (g *gen) full() bool {
	max := g.cfg.MaxRequests
	return max > 0 && g.measured.Load() >= int64(max)
}

func (g *gen) closedLoop(ctx context.Context, c *conn) {
	for ctx.Err() == nil && !g.full() {
		if !g.exchange(c, time.Now()) {
			return
		}
	}
}

// runFixedRate dispatches requests at cfg.Rate to whichever connection is
// free; a request waits in the queue while all are busy, and that wait is
// part of its latency.
func (g *gen) runFixedRate(ctx context.Context, conns []*conn, wg *sync.WaitGroup) {
	jobs := make(chan time.Time, 1<<16)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for due := range jobs {
				if ctx.Err() != nil {
					g.late.Add(1) // due in the window, never sent: count it, do not wait
					continue
				}
				if time.Since(due) > time.Second {
					g.late.Add(1)
				}
				if !g.exchange(c, due) {
					return
				}
			}
		}()
	}
	interval := time.Duration(float64(time.Second) / g.cfg.Rate)
	start := time.Now()
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		if ctx.Err() != nil || g.full() {
			break
		}
		select {
		case jobs <- due:
		default:
			g.late.Add(1) // queue overflow: the server is hopelessly behind
		}
	}
	close(jobs)
	wg.Wait()
}
