package idem_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemtest"
)

// deadlineSeen records whether the Acquire it gets carries a deadline.
type deadlineSeen struct {
	idem.Store
	had bool
}

func (s *deadlineSeen) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	_, s.had = ctx.Deadline()
	return s.Store.Acquire(ctx, a)
}

type localDeadlineSeen struct{ *deadlineSeen }

func (localDeadlineSeen) Local() {}

// A store that may wait (any store by default) gets StoreTimeout as a
// deadline; a LocalStore, whose calls cannot wait, is spared the cost.
func TestStoreDeadlineOnlyWhereItCanFire(t *testing.T) {
	remote := &deadlineSeen{Store: newStore(t)}
	idem.New(quietConfig(remote)).Adapter().Begin(context.Background(), *charge("k", `{}`)).Lock.Abandon(context.Background(), exchange.ReasonPanic)
	if !remote.had {
		t.Fatal("a store without the LocalStore capability was called without a deadline")
	}
	local := localDeadlineSeen{&deadlineSeen{Store: newStore(t)}}
	idem.New(quietConfig(local)).Adapter().Begin(context.Background(), *charge("k", `{}`)).Lock.Abandon(context.Background(), exchange.ReasonPanic)
	if local.had {
		t.Fatal("a LocalStore was given a deadline it can never need")
	}
}

// oneProcessStore says, as the GORM store on SQLite does, that only this
// process uses its records.
type oneProcessStore struct {
	idem.Store
	renewals *atomic.Int64
	one      bool
}

func (s oneProcessStore) OneProcess() bool { return s.one }

func (s oneProcessStore) Renew(ctx context.Context, id idem.ID, token string, until time.Time) error {
	s.renewals.Add(1)
	return s.Store.Renew(ctx, id, token, until)
}

// A store that one process uses alone takes no lease (nothing renews it,
// and the key is held until the handler ends); one that says otherwise
// keeps its leases.
func TestOneProcessStoreTakesNoLease(t *testing.T) {
	for _, one := range []bool{true, false} {
		var renewals atomic.Int64
		clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
		e := idem.New(idem.Config{Store: oneProcessStore{newStore(t), &renewals, one}, Clock: clock,
			Logger: slog.New(slog.DiscardHandler)})
		d := e.Adapter().Begin(context.Background(), *charge("k", `{}`))
		clock.Advance(time.Hour)
		if r := e.Adapter().Begin(context.Background(), *charge("k", `{}`)); r.Response.Status != 409 {
			t.Fatalf("one process %v: retry an hour into the handler: %d, want 409", one, r.Response.Status)
		}
		if n := renewals.Load(); (n == 0) != one {
			t.Fatalf("one process %v: %d renewals", one, n)
		}
		d.Lock.Finish(context.Background(), 201, nil)
	}
}

// A handler left running by a timeout inside idemkit keeps its key for a
// lease, then the key is free again, on a store that takes no leases as on
// one that does (where the lease, no longer renewed, runs out).
func TestLeaveRunningFreesTheKeyAfterALease(t *testing.T) {
	for _, local := range []bool{true, false} {
		clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
		var store idem.Store = newStore(t)
		if !local {
			store = struct{ idem.Store }{store}
		}
		e := idem.New(idem.Config{Store: store, Clock: clock, Logger: slog.New(slog.DiscardHandler)})
		d := e.Adapter().Begin(context.Background(), *charge("k", `{}`))
		d.Lock.LeaveRunning(context.Background(), 503, "a test's timeout")
		if !errors.Is(context.Cause(d.Lock.Context()), idem.ErrLeaseLost) {
			t.Fatalf("local %v: the handler left running was not told to stop", local)
		}
		if r := e.Adapter().Begin(context.Background(), *charge("k", `{}`)); r.Response.Status != 409 {
			t.Fatalf("local %v: retry right away: %d, want 409", local, r.Response.Status)
		}
		clock.Advance(e.Config().Lease + time.Second)
		r := e.Adapter().Begin(context.Background(), *charge("k", `{}`))
		if r.Action != exchange.Run {
			t.Fatalf("local %v: retry a lease later: %+v, want the key free", local, r.Response)
		}
		r.Lock.Finish(context.Background(), 201, nil)
	}
}
