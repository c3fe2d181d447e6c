package gormstore

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// purgeRenewEnv sets how long TestPurgeBesideRenewBatch runs (a Go
// duration; 3 s by default): set it to a minute or more to soak by hand.
const purgeRenewEnv = "IDEMKIT_PURGE_RENEW_TIME"

// TestPurgeBesideRenewBatch: two purgers and two batch renewals (two
// instances) run at once on one table while new records keep expiring,
// and none of their statements fails, a deadlock included. Time runs
// fast: records written with a TTL of 1000 s of the test's clock expire a
// second after they were written, as they would a TTL later. Half the handlers whose
// leases are renewed run past their records' expiry (a TTL shorter than
// a handler): every purge reads their rows (they are expired) but must
// leave them (their leases are live), in expiry order, while each renewal
// locks them in key order.
func TestPurgeBesideRenewBatch(t *testing.T) {
	run := 3 * time.Second
	if v := os.Getenv(purgeRenewEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", purgeRenewEnv, v, err)
		}
		run = d
	}
	for _, name := range []string{"mysql", "postgres"} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t, backendNamed(name).open(t))
			begin := time.Now()
			// The test's clock: a second of it per millisecond.
			now := func() time.Time { return t0.Add(time.Since(begin) * 1000) }
			const live = 400
			expiry := func(i int) time.Time {
				if i%2 == 0 {
					return t0.Add(-time.Duration(1+i*7919%1000) * time.Second)
				}
				return t0.Add(24*time.Hour + time.Duration(i)*time.Second)
			}
			insertRecords(t, s, idem.InFlight, "live", live, func(int) time.Time { return t0.Add(1000 * time.Hour) }, expiry)
			held := make([][]idem.Held, 2) // each instance's half
			for i := range live {
				held[i%2] = append(held[i%2], idem.Held{ID: idem.ID{Key: fmt.Sprintf("live-%06d", i)}, Token: "tok"})
			}
			var (
				stop                              atomic.Bool
				renewals, purges, purged, written atomic.Int64
				mu                                sync.Mutex
				failures                          []error
				wg                                sync.WaitGroup
			)
			fail := func(err error) {
				mu.Lock()
				failures = append(failures, err)
				mu.Unlock()
			}
			call := func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 30*time.Second)
			}
			for i := range held {
				wg.Go(func() { // an instance's renewer
					lost := make([]bool, len(held[i]))
					for !stop.Load() {
						ctx, cancel := call()
						err := s.RenewBatch(ctx, held[i], now().Add(time.Hour), lost)
						cancel()
						if err != nil {
							fail(fmt.Errorf("RenewBatch: %w", err))
							continue
						}
						renewals.Add(1)
						for j, l := range lost {
							if l {
								fail(fmt.Errorf("RenewBatch: lease %v reported lost", held[i][j].ID))
								return
							}
						}
					}
				})
				wg.Go(func() { // an instance's purger
					for !stop.Load() {
						ctx, cancel := call()
						n, err := s.Purge(ctx, now(), 100)
						cancel()
						if err != nil {
							fail(fmt.Errorf("Purge: %w", err))
							continue
						}
						purges.Add(1)
						purged.Add(int64(n))
					}
				})
			}
			wg.Go(func() { // completed records with a TTL of a few seconds of the test's clock
				for r := 0; !stop.Load(); r++ {
					if written.Load()-purged.Load() > 5000 {
						time.Sleep(time.Millisecond)
						continue
					}
					at := func(i int) time.Time { return now().Add(time.Duration(1000+i) * time.Second) }
					if err := writeRecords(s, idem.Completed, fmt.Sprint("done-", r), 100, at, at); err != nil {
						fail(fmt.Errorf("writing records: %w", err))
						return
					}
					written.Add(100)
				}
			})
			time.Sleep(run)
			stop.Store(true)
			wg.Wait()
			t.Logf("%v: %d batch renewals of %d leases, %d purges deleting %d of %d records written, %d failures",
				run, renewals.Load(), live/2, purges.Load(), purged.Load(), written.Load(), len(failures))
			kinds := map[string]int{}
			for _, err := range failures {
				kinds[strings.SplitN(err.Error(), ":", 2)[0]]++
			}
			if len(failures) > 0 {
				t.Logf("failures: %v", kinds)
				t.Fatalf("%d calls failed, the first: %v", len(failures), failures[0])
			}
			if renewals.Load() == 0 || purged.Load() == 0 {
				t.Fatal("no renewal or no purge went through: the test proves nothing")
			}
			for _, h := range append(held[0], held[1]...) {
				if rec, err := s.Get(testCtx(t), h.ID); err != nil || rec.State != idem.InFlight {
					t.Fatalf("live record %v: %v (%v)", h.ID, rec.State, err)
				}
			}
		})
	}
}
