package idem_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

type failingRenewals struct{ idem.Store }

func (failingRenewals) Renew(context.Context, idem.ID, string, time.Time) error {
	return errors.New("store unreachable")
}

// A handler whose renewals fail is told its lease is lost at least one
// renewer tick (RenewEvery/4) before the lease runs out, wherever its
// lease falls between the renewer's passes: a handler that stops within a
// tick of being told then never runs beside a request that takes the key
// over when the lease ends. (The first seed of the deterministic
// simulation that showed the overlap is among its regression seeds.)
func TestLeaseLostAtLeastATickBeforeTheLeaseEnds(t *testing.T) {
	const lease, every = 30 * time.Second, 10 * time.Second
	const tick = every / 4
	for _, offset := range []time.Duration{0, 100 * time.Millisecond, time.Second, 2 * time.Second, 2400 * time.Millisecond} {
		t.Run(offset.String(), func(t *testing.T) {
			mem := memstore.New(memstore.WithPurgeInterval(0))
			defer mem.Close()
			t0 := time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC)
			clock := idemtest.NewClock(t0)
			e := idem.New(idem.Config{
				Store: failingRenewals{mem}, Clock: clock, Lease: lease, RenewEvery: every,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			begin := func(key string) exchange.Lock {
				d := e.Adapter().Begin(context.Background(), exchange.Request{Method: "POST", Path: "/p", KeyLines: []string{key}, Body: []byte{}})
				if d.Action != exchange.Run {
					t.Fatalf("Begin %s: action %v, want Run", key, d.Action)
				}
				return d.Lock
			}
			first := begin(`"a"`) // starts the renewer's passes at t0
			clock.Advance(offset)
			l := begin(`"b"`)
			leaseEnd := t0.Add(offset + lease)
			for clock.Now().Before(leaseEnd) && l.Context().Err() == nil {
				clock.Advance(100 * time.Millisecond)
			}
			ctx := l.Context()
			if !errors.Is(context.Cause(ctx), idem.ErrLeaseLost) {
				t.Fatalf("the lease ran out at %s and the handler was not told (cause %v)", leaseEnd.Sub(t0), context.Cause(ctx))
			}
			if margin := leaseEnd.Sub(clock.Now()); margin < tick {
				t.Fatalf("the handler was told its lease is lost %s before it runs out, want at least one tick (%s)", margin, tick)
			}
			for _, l := range []exchange.Lock{first, l} {
				_ = l.Abandon(context.Background(), exchange.ReasonPanic)
			}
		})
	}
}
