package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/redis/go-redis/v9"
)

// TestRenewBatch: one batch renews every lease its token still holds and
// reports each one it no longer holds, as Renew would, for records spread
// over every slot of a Cluster; a node that has forgotten the script (a
// restart, SCRIPT FLUSH) still renews.
func TestRenewBatch(t *testing.T) {
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			c := top.dial(t)
			s := newStore(t, c)
			ctx := testContext(t)
			const n = 60
			held := make([]idem.Held, n)
			wantLost := make([]bool, n)
			for i := range held {
				id := idem.ID{Scope: "batch", Key: fmt.Sprint("k-", i)}
				held[i] = idem.Held{ID: id, Token: "tok"}
				if i%6 == 5 {
					wantLost[i] = true // never acquired
					continue
				}
				if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
					t.Fatal(err)
				}
				switch i % 6 {
				case 1: // taken over
					wantLost[i] = true
					if _, o, err := s.Acquire(ctx, acquireAt(id, "tok-next", t0.Add(lease))); err != nil || o != idem.AcquireTookOver {
						t.Fatalf("takeover: %v %v", o, err)
					}
				case 2: // completed
					wantLost[i] = true
					if err := s.Complete(ctx, id, "tok", idem.Completion{Response: exchange.Response{Status: 200}, CompletedAt: t0, ExpiresAt: t0.Add(ttl)}); err != nil {
						t.Fatal(err)
					}
				case 3: // released
					wantLost[i] = true
					if err := s.Release(ctx, id, "tok"); err != nil {
						t.Fatal(err)
					}
				}
			}
			flushScripts(t, c)
			until := t0.Add(3 * lease)
			lost := make([]bool, n)
			for i := range lost {
				lost[i] = !wantLost[i] // every flag must be written
			}
			if err := s.RenewBatch(ctx, held, until, lost); err != nil {
				t.Fatal(err)
			}
			for i, h := range held {
				if lost[i] != wantLost[i] {
					t.Fatalf("lease %d: lost = %v, want %v", i, lost[i], wantLost[i])
				}
				rec, err := s.Get(ctx, h.ID)
				switch {
				case !wantLost[i] && (err != nil || !rec.LeaseUntil.Equal(until)):
					t.Fatalf("lease %d: %v until %v, want renewed until %v", i, err, rec.LeaseUntil, until)
				case i%6 == 1 && (err != nil || rec.Token != "tok-next" || !rec.LeaseUntil.Equal(t0.Add(2*lease))):
					t.Fatalf("lease %d: the successor's record changed: %q until %v (%v)", i, rec.Token, rec.LeaseUntil, err)
				case i%6 == 2 && (err != nil || rec.State != idem.Completed):
					t.Fatalf("lease %d: the completed record changed: %v (%v)", i, rec.State, err)
				}
			}
			if err := s.RenewBatch(ctx, nil, until, nil); err != nil {
				t.Fatalf("empty batch: %v", err)
			}
		})
	}
}

// flushScripts makes every node forget the store's scripts.
func flushScripts(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	ctx := testContext(t)
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.ScriptFlush(ctx).Err() })
	} else {
		err = c.ScriptFlush(ctx).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestRenewBatchErrors: a system error is an error, never a lease
// reported lost; a mismatched result slice is refused.
func TestRenewBatchErrors(t *testing.T) {
	c := dialSingle(t)
	s := newStore(t, c)
	ctx := testContext(t)
	id := idem.ID{Key: "k"}
	if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
		t.Fatal(err)
	}
	held := []idem.Held{{ID: id, Token: "tok"}}
	if err := s.RenewBatch(ctx, held, t0.Add(time.Hour), make([]bool, 2)); err == nil {
		t.Fatal("RenewBatch with 1 lease and 2 results succeeded")
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.RenewBatch(canceled, held, t0.Add(time.Hour), make([]bool, 1)); err == nil {
		t.Fatal("RenewBatch with a canceled context succeeded")
	}
	// Redis refusing the batch: another type under the record's key.
	if err := c.Set(ctx, s.Key(idem.ID{Key: "string"}), "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	lost := make([]bool, 2)
	err := s.RenewBatch(ctx, append(held, idem.Held{ID: idem.ID{Key: "string"}, Token: "tok"}), t0.Add(time.Hour), lost)
	if err == nil {
		t.Fatalf("RenewBatch over a key of another type succeeded, lost %v", lost)
	}
}

// TestRenewBatchLarge: a batch longer than one script's share is split,
// and every lease still gets its own answer.
func TestRenewBatchLarge(t *testing.T) {
	s := newStore(t, dialSingle(t))
	ctx := testContext(t)
	n := 2*maxBatchScript + 17
	held := make([]idem.Held, n)
	wantLost := make([]bool, n)
	for i := range held {
		held[i] = idem.Held{ID: idem.ID{Key: fmt.Sprint("k-", i)}, Token: "tok"}
		if wantLost[i] = i%7 == 3; !wantLost[i] {
			if _, _, err := s.Acquire(ctx, acquireAt(held[i].ID, "tok", t0)); err != nil {
				t.Fatal(err)
			}
		}
	}
	lost := make([]bool, n)
	for i := range lost {
		lost[i] = !wantLost[i]
	}
	until := t0.Add(time.Hour)
	if err := s.RenewBatch(ctx, held, until, lost); err != nil {
		t.Fatal(err)
	}
	for i := range held {
		if lost[i] != wantLost[i] {
			t.Fatalf("lease %d: lost = %v, want %v", i, lost[i], wantLost[i])
		}
	}
	for _, i := range []int{0, maxBatchScript - 1, maxBatchScript, 2 * maxBatchScript, n - 1} {
		if rec, err := s.Get(ctx, held[i].ID); err != nil || !rec.LeaseUntil.Equal(until) {
			t.Fatalf("lease %d: until %v (%v), want %v", i, rec.LeaseUntil, err, until)
		}
	}
}
