package idemsim_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemsim"
	"github.com/idemkit/idemkit/core/memstore"
)

// The simulation itself is tested against stores broken on purpose: each
// must be caught within a few hundred seeds, by the store contract check
// and, with it off, by the invariants on what the handlers did.

// releaseIgnoresToken deletes the in-flight record whoever holds it.
type releaseIgnoresToken struct{ *memstore.Store }

func (s releaseIgnoresToken) Release(ctx context.Context, id idem.ID, _ string) error {
	rec, err := s.Get(ctx, id)
	if err != nil || rec.State != idem.InFlight {
		return idem.ErrLockLost
	}
	return s.Store.Release(ctx, id, rec.Token)
}

// renewForgets answers every renewal with success and renews nothing.
type renewForgets struct{ *memstore.Store }

func (renewForgets) Renew(context.Context, idem.ID, string, time.Time) error { return nil }

// completeIgnoresToken completes the in-flight record whoever holds it.
type completeIgnoresToken struct{ *memstore.Store }

func (s completeIgnoresToken) Complete(ctx context.Context, id idem.ID, _ string, c idem.Completion) error {
	rec, err := s.Get(ctx, id)
	if err != nil || rec.State != idem.InFlight {
		return idem.ErrLockLost
	}
	return s.Store.Complete(ctx, id, rec.Token, c)
}

// neverTakesOver leaves a lapsed lease in place for ever.
type neverTakesOver struct{ *memstore.Store }

func (s neverTakesOver) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	if rec, err := s.Get(ctx, a.ID); err == nil && rec.State == idem.InFlight && !rec.Expired(a.Now) {
		return rec, idem.AcquireExisting, nil
	}
	return s.Store.Acquire(ctx, a)
}

// batchIgnoresToken renews, in batches, the in-flight record of each ID
// whoever holds it: a statement that left the token out of its WHERE.
type batchIgnoresToken struct{ *memstore.Store }

func (s batchIgnoresToken) RenewBatch(ctx context.Context, held []idem.Held, until time.Time, lost []bool) error {
	for i, h := range held {
		rec, err := s.Get(ctx, h.ID)
		if err != nil || rec.State != idem.InFlight || s.Renew(ctx, h.ID, rec.Token, until) != nil {
			lost[i] = true
		}
	}
	return nil
}

// renewFindsNoRecord takes a renewal that finds no record at all for a
// success: a statement that reports ErrLockLost only for a record another
// token holds, so that the holder of a key an operator forgot goes on
// renewing it, untold.
type renewFindsNoRecord struct{ *memstore.Store }

func (s renewFindsNoRecord) Renew(ctx context.Context, id idem.ID, token string, until time.Time) error {
	err := s.Store.Renew(ctx, id, token, until)
	if _, e := s.Get(ctx, id); errors.Is(err, idem.ErrLockLost) && errors.Is(e, idem.ErrNotFound) {
		return nil
	}
	return err
}

func TestSimCatchesBrokenStores(t *testing.T) {
	const maxSeeds = 500
	for _, c := range []struct {
		name string
		wrap func(*memstore.Store) idem.Store
		// inv is the invariant that must catch it without the contract
		// check; "" if none can: a stale holder's completion, unfenced,
		// completes its successor's in-flight record, whose own completion
		// then fails, so one response is recorded and no handler overlaps.
		inv string
	}{
		{"ReleaseIgnoresToken", func(s *memstore.Store) idem.Store { return releaseIgnoresToken{s} }, "1 "},
		{"RenewForgets", func(s *memstore.Store) idem.Store { return renewForgets{s} }, "1 "},
		{"CompleteIgnoresToken", func(s *memstore.Store) idem.Store { return completeIgnoresToken{s} }, ""},
		{"NeverTakesOver", func(s *memstore.Store) idem.Store { return neverTakesOver{s} }, "4 "},
		{"BatchIgnoresToken", func(s *memstore.Store) idem.Store { return batchIgnoresToken{s} }, "4 "},
		{"RenewFindsNoRecord", func(s *memstore.Store) idem.Store { return renewFindsNoRecord{s} }, "1 "},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Remote, as memTarget: a stale holder's completion that lands
			// late is what an unfenced Complete gets wrong.
			target := idemsim.Target{Open: func(testing.TB) (idem.Store, func()) {
				s := memstore.New(memstore.WithPurgeInterval(0))
				return c.wrap(s), func() { _ = s.Close() }
			}, Remote: true}
			for _, contract := range []bool{true, false} {
				if !contract && c.inv == "" {
					continue
				}
				f := firstFailure(t, target, &idemsim.Options{NoContract: !contract}, maxSeeds)
				switch {
				case f == nil:
					t.Errorf("contract check %v: none of seeds 1 to %d caught it", contract, maxSeeds)
				case contract && !strings.HasPrefix(f.Invariant, "store contract"):
					t.Errorf("with the contract check, seed %d was caught by invariant %s, not the contract: %s", f.Seed, f.Invariant, f.Message)
				case !contract && !strings.HasPrefix(f.Invariant, c.inv):
					t.Errorf("without the contract check, seed %d was caught by invariant %s, want %s: %s", f.Seed, f.Invariant, c.inv, f.Message)
				default:
					t.Logf("contract check %v: seed %d, step %d, invariant %s: %s", contract, f.Seed, f.Step, f.Invariant, f.Message)
				}
			}
		})
	}
}

func firstFailure(t *testing.T, target idemsim.Target, o *idemsim.Options, seeds uint64) *idemsim.Failure {
	t.Helper()
	for seed := uint64(1); seed <= seeds; seed++ {
		store, done := target.Open(t)
		f, _ := idemsim.RunSeed(seed, store, target, o)
		done()
		if f != nil {
			var err error = f
			if !errors.As(err, &f) {
				t.Fatal("a Failure is an error")
			}
			return f
		}
	}
	return nil
}
