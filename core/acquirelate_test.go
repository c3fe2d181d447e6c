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
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

// slowAcquire answers Acquire delay after it wrote, on the manual clock.
type slowAcquire struct {
	idem.Store
	clock *idemtest.Clock
	delay time.Duration
}

func (s slowAcquire) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	rec, out, err := s.Store.Acquire(ctx, a)
	s.clock.Advance(s.delay)
	return rec, out, err
}

// An Acquire whose answer comes back when the lease it took is over, or
// about to be, does not run the handler: from the lease's end another
// request may take the key over and run it, and the Engine could no
// longer tell this handler to stop in time. The key is released and the
// client told to retry. (The deterministic simulation found two handlers
// running at once this way, with a StoreTimeout longer than the lease.)
func TestAcquireAnsweredTooLateDoesNotRun(t *testing.T) {
	const lease, every = 30 * time.Second, 10 * time.Second
	for _, c := range []struct {
		delay time.Duration
		run   bool
	}{
		{time.Second, true},
		{lease - every, true},    // two ticks and more left
		{lease - every/4, false}, // one tick left: too late to be told in time
		{lease + time.Second, false},
	} {
		t.Run(c.delay.String(), func(t *testing.T) {
			mem := memstore.New(memstore.WithPurgeInterval(0))
			defer mem.Close()
			clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
			var events []idemevent.Event
			e := idem.New(idem.Config{
				Store: slowAcquire{mem, clock, c.delay}, Clock: clock, Lease: lease, RenewEvery: every,
				StoreTimeout: 2 * lease, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
				OnEvent: func(_ context.Context, ev idemevent.Event) { events = append(events, ev) },
			})
			id := idem.ID{Key: "k"}
			d := e.Adapter().Begin(context.Background(), exchange.Request{Method: "POST", Path: "/p", KeyLines: []string{`"k"`}, Body: []byte{}})
			if c.run {
				if d.Action != exchange.Run {
					t.Fatalf("action %v, want Run", d.Action)
				}
				_ = d.Lock.Abandon(context.Background(), exchange.ReasonPanic)
				return
			}
			if d.Action != exchange.Respond || d.Response.Status != 503 {
				t.Fatalf("action %v, status %d: the handler would run on a lease that is over; want 503", d.Action, d.Response.Status)
			}
			if len(events) != 1 || events[0].Kind != idemevent.StoreError || events[0].Err == nil {
				t.Fatalf("events %+v, want one store-error saying why", events)
			}
			if _, err := mem.Get(context.Background(), id); !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("the record is left behind (%v): it must be released", err)
			}
		})
	}
}
