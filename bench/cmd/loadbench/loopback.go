package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/idemkit/idemkit/bench/internal/loadgen"
	"github.com/idemkit/idemkit/bench/internal/report"
	"github.com/idemkit/idemkit/bench/internal/servers"
)

// kindsOf returns the configurations of fw that the run measures, rotated
// by rep so that no configuration always runs first after a framework's
// children start.
func (b *bench) kindsOf(fw string, rep int) []string {
	var ks []string
	for _, k := range servers.Kinds {
		if slices.Contains(b.cfg.kinds, k) && servers.Valid(fw, k) {
			ks = append(ks, k)
		}
	}
	if len(ks) > 0 {
		r := rep % len(ks)
		ks = append(ks[r:], ks[:r]...)
	}
	return ks
}

// measures reports whether the loopback section runs kind with workload
// at conns connections: the fleet configurations at -fleet-workloads and
// -fleet-conns, the others at -workloads and -conns.
func (b *bench) measures(kind, workload string, conns int) bool {
	if servers.Fleet(kind) {
		return slices.Contains(b.cfg.fleetWorkloads, workload) && slices.Contains(b.cfg.fleetConns, conns)
	}
	return slices.Contains(b.cfg.workloads, workload) && slices.Contains(b.cfg.conns, conns)
}

// loopbackGrid returns every workload and concurrency some configuration
// is measured at, in the order given.
func (b *bench) loopbackGrid() (workloads []string, conns []int) {
	for _, w := range append(slices.Clone(b.cfg.workloads), b.cfg.fleetWorkloads...) {
		if !slices.Contains(workloads, w) {
			workloads = append(workloads, w)
		}
	}
	for _, n := range append(slices.Clone(b.cfg.conns), b.cfg.fleetConns...) {
		if !slices.Contains(conns, n) {
			conns = append(conns, n)
		}
	}
	slices.Sort(conns)
	return workloads, conns
}

// loopback measures every framework, configuration, workload and
// concurrency, rep times. Within a repetition a framework's configurations
// run one after the other for each workload and concurrency, so that the
// ratio of each to the bare handler (or to its one-statement baseline)
// compares runs minutes apart at most.
func (b *bench) loopback() error {
	c := b.cfg
	workloads, conns := b.loopbackGrid()
	total := 0
	for _, fw := range c.frameworks {
		for _, k := range b.kindsOf(fw, 0) {
			for _, w := range workloads {
				for _, n := range conns {
					if b.measures(k, w, n) {
						total += c.reps
					}
				}
			}
		}
	}
	done := 0
	for rep := range c.reps {
		for _, fw := range c.frameworks {
			kinds := b.kindsOf(fw, rep)
			children := map[string]*child{}
			for _, k := range kinds {
				ch, err := b.startServer(fw+"/"+k, 0)
				if err != nil {
					b.note("%s/%s: %v", fw, k, err)
					continue
				}
				children[k] = ch
			}
			for _, w := range workloads {
				wl, err := loadgen.ParseWorkload(w)
				if err != nil {
					return err
				}
				for _, n := range conns {
					for _, k := range kinds {
						if !b.measures(k, w, n) {
							continue
						}
						done++
						ch := children[k]
						if ch == nil || b.ctx.Err() != nil {
							continue
						}
						r, err := b.loopbackRun(ch, wl, n)
						if err != nil {
							b.note("rep %d %s/%s %s c=%d: %v", rep+1, fw, k, w, n, err)
							continue
						}
						r.Framework, r.Kind, r.Rep = fw, k, rep
						b.data.Runs = append(b.data.Runs, r)
						b.logf("[%d/%d] rep %d %-7s %-7s %-8s c=%-2d %8.0f req/s p50 %-9s p99 %-9s %5.1f allocs %6.0f B %5.1f µs CPU %v",
							done, total, rep+1, fw, k, w, n, r.RPS, r.P50, r.P99, r.AllocsPerOp, r.BytesPerOp, r.CPUPerOp/1e3, r.Status)
					}
				}
			}
			for _, ch := range children {
				ch.stop()
			}
		}
	}
	return nil
}

// loopbackRun resets ch's server (an empty store) and runs one workload
// against it, reading the server's allocation counters at the edges of the
// measured window.
func (b *bench) loopbackRun(ch *child, wl loadgen.Workload, conns int) (report.Run, error) {
	if err := ch.reset(); err != nil {
		return report.Run{}, err
	}
	var before, after memReply
	var memErr error
	res, err := loadgen.Run(b.ctx, loadgen.Config{
		Addr: ch.addr, Path: servers.Path, KeyHeader: "Idempotency-Key", Body: servers.RequestBody,
		Workload: wl, Conns: conns, Warmup: b.cfg.warmup, Duration: b.cfg.duration,
		MaxRequests: b.cfg.maxRequests, Prefix: prefix(),
		OnWindow: func(open bool) {
			m := &after
			if open {
				m = &before
			}
			if err := ch.call(m, "mem"); err != nil && memErr == nil {
				memErr = err
			}
		},
	})
	if err != nil {
		if tail := lastLines(ch.stderr.String(), 3); tail != "" {
			err = fmt.Errorf("%w; the server's stderr ends with: %s", err, tail)
		}
		return report.Run{}, err
	}
	if memErr != nil {
		return report.Run{}, fmt.Errorf("reading the server's counters: %w", memErr)
	}
	// The counters cover the window's edges, whose requests the generator
	// may or may not count; over thousands of requests the difference is
	// noise.
	n := float64(res.Requests)
	return report.Run{
		Workload: wl.String(), Conns: conns,
		RPS: res.RPS, P50: res.Latency.P50, P99: res.Latency.P99,
		AllocsPerOp: float64(after.Mallocs-before.Mallocs) / n,
		CPUPerOp:    float64(after.CPU-before.CPU) / n,
		BytesPerOp:  float64(after.Bytes-before.Bytes) / n,
		Status:      res.Status, Replayed: res.Replayed, Errors: res.Errors,
	}, nil
}

// lastLines returns the last n lines of s, joined with " | ".
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.TrimSpace(strings.Join(lines, " | "))
}
