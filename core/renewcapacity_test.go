package idem_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
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
	locks := make([]*idem.Lock, handlers)
	for i := range locks {
		d := e.Begin(context.Background(), charge(fmt.Sprintf("k-%d", i), `{}`))
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
	locks := make([]*idem.Lock, 10)
	for i := range locks {
		locks[i] = e.Begin(context.Background(), charge(fmt.Sprintf("k-%d", i), `{}`)).Lock
	}
	clock.Advance(3 * time.Second)
	for i, l := range locks {
		if told := context.Cause(l.Context()) != nil; told != (i%2 == 1) {
			t.Errorf("key k-%d: told its lease is lost = %v, want %v", i, told, i%2 == 1)
		}
		l.Abandon(context.Background(), idem.ReasonPanic)
	}
}
