package main

import (
	"context"
	"fmt"
	"time"

	"github.com/idemkit/idemkit/bench/internal/loadgen"
	"github.com/idemkit/idemkit/bench/internal/report"
	"github.com/idemkit/idemkit/bench/internal/servers"
)

// filled is a serving child whose store holds records.
type filled struct {
	ch      *child
	records int
}

// fillServer starts a net/http server on store and fills it with n
// records, recording the live heap they take.
func (b *bench) fillServer(store string, n int) (*filled, error) {
	ch, err := b.startServer("nethttp/"+store, 0)
	if err != nil {
		return nil, err
	}
	var empty, full memReply
	var took tookReply
	err = ch.call(&empty, "heap")
	if err == nil {
		err = ch.call(&took, "fill %d", n)
	}
	if err == nil {
		err = ch.call(&full, "heap")
	}
	if err != nil {
		ch.stop()
		return nil, err
	}
	h := report.HeapFigure{Store: store, Records: n, FillTime: took.Took,
		PerRecord: (float64(full.Heap) - float64(empty.Heap)) / float64(n)}
	b.data.Heap = append(b.data.Heap, h)
	b.logf("%s store: %d records filled in %s, %.0f B of live heap per record", store, n, took.Took.Round(time.Millisecond), h.PerRecord)
	return &filled{ch: ch, records: n}, nil
}

// scale measures First against stores holding few and many records, the
// two alternated in each repetition.
func (b *bench) scale() error {
	for _, store := range []string{"mem", "sqlite"} {
		if b.ctx.Err() != nil {
			return b.ctx.Err()
		}
		var fs []*filled
		for _, n := range []int{b.cfg.scaleSmall, b.cfg.scaleBig} {
			f, err := b.fillServer(store, n)
			if err != nil {
				b.note("scale, %s store, %d records: %v", store, n, err)
				continue
			}
			fs = append(fs, f)
		}
		// One connection gives the cost of a request; the target concurrency
		// the throughput under load, with the collector's work on a big heap.
		conns := []int{1}
		if n := b.data.Setup.TargetConns; n != 1 {
			conns = append(conns, n)
		}
		for rep := range b.cfg.reps {
			for _, n := range conns {
				for i := range fs {
					f := fs[(i+rep)%len(fs)]
					if b.ctx.Err() != nil {
						break
					}
					res, err := loadgen.Run(b.ctx, loadgen.Config{
						Addr: f.ch.addr, Path: servers.Path, KeyHeader: "Idempotency-Key", Body: servers.RequestBody,
						Workload: loadgen.First, Conns: n, Warmup: b.cfg.warmup,
						Duration: b.cfg.scaleDuration, MaxRequests: b.cfg.maxRequests, Prefix: prefix(),
					})
					if err != nil {
						b.note("scale, %s store, %d records, %d connections: %v", store, f.records, n, err)
						continue
					}
					b.data.Scale = append(b.data.Scale, report.ScaleRun{Store: store, Records: f.records, Conns: n,
						Rep: rep, RPS: res.RPS, P50: res.Latency.P50, P99: res.Latency.P99})
					b.logf("scale rep %d %-6s %8d records c=%-2d: %8.0f req/s p50 %-9s p99 %s %v", rep+1, store,
						f.records, n, res.RPS, res.Latency.P50, res.Latency.P99, res.Status)
				}
			}
		}
		for _, f := range fs {
			f.ch.stop()
		}
	}
	return nil
}

// purge measures First at a fixed rate on the SQLite store without a
// purge, then while the store's purger deletes cfg.purgeRows expired rows.
func (b *bench) purge() error {
	c := b.cfg
	// No purger until the expired rows are all in: it would start on the
	// first batches while the rest are still being inserted.
	ch, err := b.startServer("nethttp/sqlite", -1)
	if err != nil {
		return err
	}
	defer ch.stop()
	if err := ch.call(nil, "fill %d", c.scaleSmall); err != nil {
		return err
	}
	run := func(ctx context.Context, d time.Duration, onWindow func(bool)) (loadgen.Result, error) {
		return loadgen.Run(ctx, loadgen.Config{
			Addr: ch.addr, Path: servers.Path, KeyHeader: "Idempotency-Key", Body: servers.RequestBody,
			Workload: loadgen.First, Conns: 16, Rate: c.purgeRate, Warmup: 500 * time.Millisecond,
			Duration: d, Prefix: prefix(), OnWindow: onWindow,
		})
	}
	without, err := run(b.ctx, c.purgeBase, nil)
	if err != nil {
		return fmt.Errorf("without a purge: %w", err)
	}
	b.logf("purge: without: p50 %s p99 %s max %s (%d requests)", without.Latency.P50, without.Latency.P99,
		without.Latency.Max, without.Requests)
	var rows rangeReply
	if err := ch.call(&rows, "expire %d", c.purgeRows); err != nil {
		return err
	}
	b.logf("purge: %d expired rows inserted in %s", rows.Last-rows.First+1, rows.Took.Round(time.Millisecond))

	ctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	var began time.Time
	var took time.Duration
	finished := false
	pollErr := make(chan error, 1)
	during, err := run(ctx, c.purgeCap, func(open bool) {
		if !open {
			return
		}
		began = time.Now()
		if err := ch.call(nil, "purge-start %d", int64(100*time.Millisecond)); err != nil {
			pollErr <- err
			cancel()
			return
		}
		go func() {
			t := time.NewTicker(250 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					pollErr <- nil
					return
				case <-t.C:
				}
				var l leftReply
				if err := ch.call(&l, "left %d %d", rows.First, rows.Last); err != nil {
					pollErr <- err
					cancel()
					return
				}
				if !l.Left {
					took, finished = time.Since(began), true
					pollErr <- nil
					cancel()
					return
				}
			}
		}()
	})
	// The measurement ended, at the purge's end or at -purge-cap: stop
	// the poller, which otherwise waits for a purge outlasting the cap.
	cancel()
	if err != nil {
		return fmt.Errorf("during the purge: %w", err)
	}
	if began.IsZero() {
		return fmt.Errorf("during the purge: the measured window never opened")
	}
	if err := <-pollErr; err != nil {
		return err
	}
	if !finished {
		took = time.Since(began)
	}
	b.logf("purge: during: p50 %s p99 %s max %s (%d requests), purge took %s (finished %v)", during.Latency.P50,
		during.Latency.P99, during.Latency.Max, during.Requests, took.Round(time.Millisecond), finished)
	b.data.Purge = &report.Purge{
		Rows: int(rows.Last - rows.First + 1), Rate: c.purgeRate,
		Without: report.FromStats(without.Latency), During: report.FromStats(during.Latency),
		PurgeTook: took, Finished: finished, InsertTook: rows.Took,
		LateWithout: without.Late, LateDuring: during.Late, StatusDuring: during.Status,
	}
	return nil
}
