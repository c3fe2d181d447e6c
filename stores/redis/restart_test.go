package redisstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/redis/go-redis/v9"
)

// redisProcess is a redis-server this test started, with an append-only
// file, so that it can be killed and started again on its data.
type redisProcess struct {
	bin, dir, port string
	cmd            *exec.Cmd
}

func startRedisProcess(t *testing.T) *redisProcess {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if testing.Short() {
			t.Skip("redis-server is not installed; -short skips the tests that need Redis")
		}
		t.Fatal("redis-server is not installed: run the tests with `make test` (scripts/test-all), " +
			"whose scripts/redis-servers.sh installs it, or apt-get install redis-server")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	p := &redisProcess{bin: bin, dir: t.TempDir(), port: port}
	p.start(t)
	t.Cleanup(p.kill)
	return p
}

func (p *redisProcess) addr() string { return "127.0.0.1:" + p.port }

// start runs redis-server on p's port and directory, as an operator who
// wants durability would: appendonly yes, appendfsync everysec.
func (p *redisProcess) start(t *testing.T) {
	t.Helper()
	p.cmd = exec.Command(p.bin, "--port", p.port, "--bind", "127.0.0.1", "--dir", p.dir,
		"--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
		"--logfile", filepath.Join(p.dir, "server.log"))
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: p.addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(p.dir, "server.log"))
			t.Fatalf("redis-server did not start on %s:\n%s", p.addr(), log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends the server at once (SIGKILL), as a crash would.
func (p *redisProcess) kill() {
	if p.cmd != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// waitAOF waits until the append-only file holds want: what has reached
// the file survives the server's crash.
func (p *redisProcess) waitAOF(t *testing.T, want ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var aof []byte
		files, _ := filepath.Glob(filepath.Join(p.dir, "appendonlydir", "*.aof"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			aof = append(aof, b...)
		}
		missing := ""
		for _, w := range want {
			if !bytes.Contains(aof, []byte(w)) {
				missing = w
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the append-only file does not hold %q after 30 s", missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// movableClock is the Engine's clock, moved by hand to end a lease.
type movableClock struct{ offset atomic.Int64 }

func (c *movableClock) now() time.Time      { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *movableClock) add(d time.Duration) { c.offset.Add(int64(d)) }

// TestRedisRestart: Redis crashes while one handler runs, and comes back.
// While it is down, every guarded request gets 503 store-unavailable and
// no handler runs (fail closed); once it is back, service resumes by
// itself, on the same clients, and every record that reached the
// append-only file is there. The handler that was running when Redis went
// down answers its client, but its response is not recorded: its key
// stays held until its lease runs out, and a retry after that runs the
// handler again. That is the exactly-once gap the README's failure table
// describes, which the business's own unique constraint closes.
func TestRedisRestart(t *testing.T) {
	p := startRedisProcess(t)
	// One dial per attempt (the default is five, 100 ms apart) keeps the
	// outage's 503s quick; the command retries stay as they are.
	c := redis.NewClient(&redis.Options{Addr: p.addr(), DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	// A lease of an hour runs out only when the test moves the clock, and
	// no renewal runs meanwhile, however slow the machine.
	const testLease = time.Hour
	clock := new(movableClock)
	engine := idem.New(idem.Config{Store: s, Lease: testLease, Clock: idemtest.ClockOf(clock.now), Logger: slog.New(slog.DiscardHandler)})

	var (
		mu      sync.Mutex
		runs    = map[string]int{}
		entered = make(chan struct{})
		finish  = make(chan struct{})
	)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		runs[key]++
		n := runs[key]
		mu.Unlock()
		if key == "k-running" && n == 1 {
			close(entered)
			<-finish
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"run":%d}`, key, n)
	})
	srv := httptest.NewServer(idemhttp.Middleware(engine)(handler))
	t.Cleanup(srv.Close)
	type answer struct {
		status   int
		replayed bool
		problem  string
		body     string
	}
	post := func(key string) answer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(`{"amount":1}`))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", key, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		a := answer{status: resp.StatusCode, replayed: resp.Header.Get(exchange.ReplayedHeader) == "true", body: string(body)}
		if resp.Header.Get("Content-Type") == exchange.ProblemContentType {
			var p struct{ Type string }
			_ = json.Unmarshal(body, &p)
			a.problem = p.Type[strings.LastIndexByte(p.Type, '#')+1:]
		}
		return a
	}
	runsOf := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return runs[key]
	}

	before := post("k-before")
	if before.status != http.StatusCreated {
		t.Fatalf("before the crash: %+v", before)
	}
	running := make(chan answer, 1)
	go func() { running <- post("k-running") }()
	<-entered
	p.waitAOF(t, before.body, s.Key(idem.ID{Key: "k-running"}))

	p.kill()
	for _, key := range []string{"k-down", "k-before"} {
		if a := post(key); a.status != http.StatusServiceUnavailable || a.problem != exchange.ProblemStoreUnavailable {
			t.Fatalf("Redis down, POST %s: %+v; want 503 %s", key, a, exchange.ProblemStoreUnavailable)
		}
	}
	if n := runsOf("k-down"); n != 0 {
		t.Fatalf("Redis down: the handler ran %d times", n)
	}
	close(finish)
	if a := <-running; a.status != http.StatusCreated {
		t.Fatalf("the request running when Redis went down: %+v; want its handler's 201", a)
	}

	p.start(t)
	// No restart of anything else: the next requests find Redis again.
	deadline := time.Now().Add(30 * time.Second)
	attempts := 0
	for {
		attempts++
		a := post("k-after")
		if a.status == http.StatusCreated {
			break
		}
		if a.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("after the restart (attempt %d): %+v", attempts, a)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := runsOf("k-after"); n != 1 {
		t.Fatalf("after the restart the handler ran %d times for one key", n)
	}
	if a := post("k-before"); a.status != http.StatusCreated || !a.replayed || a.body != before.body {
		t.Fatalf("the record written before the crash: %+v; want the replay of %s", a, before.body)
	}
	if a := post("k-down"); a.status != http.StatusCreated || a.replayed || runsOf("k-down") != 1 {
		t.Fatalf("the key refused during the outage: %+v after %d runs; want its first run", a, runsOf("k-down"))
	}
	// The running request's record is still in flight: held until its lease ends...
	if a := post("k-running"); a.status != http.StatusConflict {
		t.Fatalf("retry of the request that ran through the outage: %+v; want 409 until its lease ends", a)
	}
	// ...and then a retry runs the handler a second time.
	clock.add(testLease)
	if a := post("k-running"); a.status != http.StatusCreated || a.replayed || runsOf("k-running") != 2 {
		t.Fatalf("retry after the lease: %+v after %d runs; want a second run", a, runsOf("k-running"))
	}
}
