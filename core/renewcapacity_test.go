package idem_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

// bareStore offers only the methods of idem.Store: none of the optional
// capabilities (idem.BatchRenewer, idem.LocalStore) of the store it wraps,
// as a store a user writes may lack them.
type bareStore struct{ idem.Store }

// Defect: without batch renewal, a pass started at most 32 renewals and
// left the rest for the next tick, however fast the store answered, so
// with a few hundred long handlers most of them lost their lease. The
// renewals must keep pace with the store, not with the tick.
func TestRenewalsKeepPaceWithTheStore(t *testing.T) {
	const handlers = 1000
	mem := memstore.New(memstore.WithPurgeInterval(0))
	defer mem.Close()
	clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
	e := idem.New(idem.Config{
		Store: bareStore{mem}, Clock: clock, Lease: 600 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	locks := make([]exchange.Lock, handlers)
	for i := range locks {
		d := e.Adapter().Begin(context.Background(), *charge(fmt.Sprintf("k-%d", i), `{}`))
		if d.Lock == nil {
			t.Fatalf("key %d: %+v, want a lock", i, d)
		}
		locks[i] = d.Lock
	}
	// Five leases' worth of handlers running; every goroutine the renewer
	// starts runs at once, as on an idle machine.
	for range 300 {
		clock.Advance(10 * time.Millisecond)
	}
	lost := 0
	for _, l := range locks {
		if context.Cause(l.Context()) != nil {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d handlers were told their lease is lost, on a store that answers at once", lost, handlers)
	}
	for i, l := range locks {
		if err := recorded(l.Finish(context.Background(), 201, nil)); err != nil {
			t.Fatalf("key %d: Finish: %v", i, err)
		}
	}
	rec, err := mem.Get(context.Background(), idem.ID{Key: "k-999"})
	if err != nil || rec.State != idem.Completed {
		t.Fatalf("the last key's record: %+v, %v; want it completed", rec, err)
	}
}

// batchingStore renews leases in batches (idem.BatchRenewer), one lease
// after another in one call, and keeps the size of every call; it offers
// no other capability of the memory store (idem.LocalStore: the Engine
// would take no leases on it).
type batchingStore struct {
	idem.Store
	mu    sync.Mutex
	sizes []int
}

func (s *batchingStore) RenewBatch(ctx context.Context, held []idem.Held, until time.Time, lost []bool) error {
	s.mu.Lock()
	s.sizes = append(s.sizes, len(held))
	s.mu.Unlock()
	seen := map[idem.ID]bool{}
	for i, h := range held {
		if seen[h.ID] {
			return fmt.Errorf("lease of %q twice in one batch", h.ID.Key)
		}
		seen[h.ID] = true
		if err := s.Renew(ctx, h.ID, h.Token, until); errors.Is(err, idem.ErrLockLost) {
			lost[i] = true
		} else if err != nil {
			return err
		}
	}
	return nil
}

// The renewer's batch path, at scale: with more handlers running than one
// batch holds (a few batches a pass), every lease is renewed at every pass
// that finds it due, so none is told its lease is lost on a store that
// answers at once; and a lease the store says is lost (its record was
// forgotten by an operator) is told at the next renewal, long before it
// would have run out. A renewer that left one lock of a batch out, or
// ignored what the batch said was lost, fails here: the simulation never
// runs enough handlers at once to fill a batch.
func TestBatchRenewalsKeepEveryLease(t *testing.T) {
	const handlers = 700 // more than two batches of maxBatchRenewal (256)
	mem := memstore.New(memstore.WithPurgeInterval(0))
	defer mem.Close()
	store := &batchingStore{Store: mem}
	clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
	const lease = 600 * time.Millisecond
	e := idem.New(idem.Config{
		Store: store, Clock: clock, Lease: lease, RenewEvery: lease / 3,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	locks := make([]exchange.Lock, handlers)
	ids := make([]idem.ID, handlers)
	for i := range locks {
		key := fmt.Sprintf("k-%d", i)
		d := e.Adapter().Begin(context.Background(), *charge(key, `{}`))
		if d.Lock == nil {
			t.Fatalf("key %d: %+v, want a lock", i, d)
		}
		locks[i], ids[i] = d.Lock, idem.ID{Key: key}
	}
	// Five leases' worth of handlers running.
	for range 300 {
		clock.Advance(10 * time.Millisecond)
	}
	for i, l := range locks {
		if cause := context.Cause(l.Context()); cause != nil {
			t.Fatalf("key %d of %d was told %v, on a store that renews every lease at once", i, handlers, cause)
		}
		rec, err := mem.Get(context.Background(), ids[i])
		if err != nil || !rec.LeaseUntil.After(clock.Now()) {
			t.Fatalf("key %d: lease until %v (%v) at %v: not renewed", i, rec.LeaseUntil, err, clock.Now())
		}
	}
	store.mu.Lock()
	calls, biggest := len(store.sizes), slices.Max(store.sizes)
	store.mu.Unlock()
	if biggest >= handlers || calls < 2*15 {
		t.Fatalf("%d RenewBatch calls, the largest of %d leases: want passes of several batches each", calls, biggest)
	}

	// An operator forgets every seventh record with force: its holder's
	// next renewal is refused, and it is told at once, well within its
	// lease; the others run on.
	for i := 0; i < handlers; i += 7 {
		if err := mem.Forget(context.Background(), ids[i], true); err != nil {
			t.Fatal(err)
		}
	}
	for range 25 { // a renewal interval and a tick: every lease's next renewal
		clock.Advance(10 * time.Millisecond)
	}
	for i, l := range locks {
		told := errors.Is(context.Cause(l.Context()), idem.ErrLeaseLost)
		if told != (i%7 == 0) {
			t.Fatalf("key %d: told its lease is lost = %v, %v after every seventh record was forgotten; want %v",
				i, told, 250*time.Millisecond, i%7 == 0)
		}
	}
	for _, l := range locks {
		l.Abandon(context.Background(), exchange.ReasonPanic)
	}
}

// halfBatch renews the leases of even keys and fails the others, as a
// store spread over nodes does when one of them fails.
type halfBatch struct{ idem.Store }

type halfFailed struct{ failed []bool }

func (e *halfFailed) Error() string        { return "node of half the leases not answering" }
func (e *halfFailed) Unrenewed(i int) bool { return e.failed[i] }

func (s halfBatch) RenewBatch(ctx context.Context, held []idem.Held, until time.Time, lost []bool) error {
	e := &halfFailed{failed: make([]bool, len(held))}
	for i, h := range held {
		var n int
		fmt.Sscanf(h.ID.Key, "k-%d", &n)
		if n%2 == 1 {
			e.failed[i] = true
			continue
		}
		if err := s.Store.Renew(ctx, h.ID, h.Token, until); err != nil {
			lost[i] = true
		}
	}
	return e
}

// Defect: one failed node of a store spread over several made the whole
// batch count as failed, so every handler was told its lease was lost,
// those whose leases the healthy nodes renewed included.
func TestPartialRenewalKeepsTheRenewedLeases(t *testing.T) {
	mem := memstore.New(memstore.WithPurgeInterval(0))
	defer mem.Close()
	clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
	e := idem.New(idem.Config{
		Store: halfBatch{mem}, Clock: clock, Lease: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	locks := make([]exchange.Lock, 10)
	for i := range locks {
		locks[i] = e.Adapter().Begin(context.Background(), *charge(fmt.Sprintf("k-%d", i), `{}`)).Lock
	}
	clock.Advance(3 * time.Second)
	for i, l := range locks {
		if told := context.Cause(l.Context()) != nil; told != (i%2 == 1) {
			t.Errorf("key k-%d: told its lease is lost = %v, want %v", i, told, i%2 == 1)
		}
		l.Abandon(context.Background(), exchange.ReasonPanic)
	}
}
