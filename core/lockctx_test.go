package idem_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemtest"
)

// The handler's context behaves the same whether the handler watched it
// from the start or looks only after the fact: a handler that checks
// ctx.Err() once its slow call returns must still learn that its lease was
// lost, and why.
func TestLockContextCancelledBeforeItIsWatched(t *testing.T) {
	clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
	cfg := quietConfig(renewFails{newStore(t), idem.ErrLockLost})
	cfg.Clock, cfg.Lease, cfg.RenewEvery = clock, 30*time.Second, 10*time.Second
	d := idem.New(cfg).Adapter().Begin(context.Background(), *charge(`"k"`, `{}`))
	if d.Action != exchange.Run {
		t.Fatalf("action %v, want Run", d.Action)
	}
	defer d.Lock.Abandon(context.Background(), exchange.ReasonPanic)
	for range 100 { // until the renewer has been refused
		clock.Advance(time.Second)
	}
	ctx := d.Lock.Context()
	select {
	case <-ctx.Done():
	default:
		t.Fatal("the lease was lost and the handler's context, first looked at now, is not done")
	}
	if !errors.Is(ctx.Err(), context.Canceled) {
		t.Fatalf("Err() = %v, want context.Canceled", ctx.Err())
	}
	if cause := context.Cause(ctx); !errors.Is(cause, idem.ErrLeaseLost) {
		t.Fatalf("Cause = %v, want ErrLeaseLost", cause)
	}
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	if !errors.Is(context.Cause(child), idem.ErrLeaseLost) {
		t.Fatalf("a context derived afterwards has cause %v, want ErrLeaseLost", context.Cause(child))
	}
	if held, ok := idem.HeldKey(child); !ok || held.ID.Key != "k" {
		t.Fatalf("HeldKey(child) = %+v, %v", held, ok)
	}
}

type ctxKey struct{}

// The handler's context carries the request's values and follows its
// cancellation, with the request's cause, however it is observed.
func TestLockContextFollowsTheRequest(t *testing.T) {
	gone := errors.New("client went away")
	for _, watch := range []bool{false, true} {
		e := idem.New(quietConfig(newStore(t)))
		parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), ctxKey{}, "v"))
		d := e.Adapter().Begin(parent, *charge(`"k"`, `{}`))
		ctx := d.Lock.Context()
		if got := ctx.Value(ctxKey{}); got != "v" {
			t.Fatalf("watch=%v: the request's value = %v, want v", watch, got)
		}
		if ctx.Err() != nil || context.Cause(ctx) != nil {
			t.Fatalf("watch=%v: running handler's context already ended: %v, %v", watch, ctx.Err(), context.Cause(ctx))
		}
		var done <-chan struct{}
		if watch {
			done = ctx.Done()
		}
		cancel(gone)
		if !watch {
			done = ctx.Done()
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("watch=%v: the request was cancelled and the handler's context was not", watch)
		}
		if !errors.Is(context.Cause(ctx), gone) {
			t.Fatalf("watch=%v: Cause = %v, want the request's", watch, context.Cause(ctx))
		}
		_ = d.Lock.Abandon(context.Background(), exchange.ReasonPanic)
	}
}

// Once the Lock has ended, its context is done, also for a goroutine the
// handler left behind that looks at it only then.
func TestLockContextDoneAfterTheLockEnds(t *testing.T) {
	for _, watch := range []bool{false, true} {
		e := idem.New(quietConfig(newStore(t)))
		d := e.Adapter().Begin(context.Background(), *charge(`"k"`, `{}`))
		ctx := d.Lock.Context()
		if watch {
			ctx.Done()
		}
		if f := d.Lock.Finish(context.Background(), 201, nil); f.Outcome != exchange.Recorded {
			t.Fatalf("Finish: %+v, want it recorded", f)
		}
		select {
		case <-ctx.Done():
		default:
			t.Fatalf("watch=%v: the Lock ended and its context is not done", watch)
		}
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("watch=%v: Err() = %v, want context.Canceled", watch, ctx.Err())
		}
	}
}

// A response whose declared Content-Length does not match the body the
// handler wrote is not whole: it is not stored, and the retry runs the
// handler again. A matching one is stored. Both for an http.Header, which
// Finish reads directly, and for any other HeaderReader.
func TestFinishStoresOnlyAWholeBody(t *testing.T) {
	for _, wrap := range []struct {
		name string
		h    func(http.Header) exchange.HeaderReader
	}{
		{"http.Header", func(h http.Header) exchange.HeaderReader { return h }},
		{"HeaderReader", func(h http.Header) exchange.HeaderReader { return valuesOnly{h} }},
	} {
		for _, tt := range []struct {
			declared string
			stored   bool
		}{{"5", true}, {"10", false}} {
			e := idem.New(quietConfig(newStore(t)))
			d := e.Adapter().Begin(context.Background(), *charge(`"k"`, `{}`))
			_, _ = d.Lock.Write([]byte("hello"))
			_ = d.Lock.Finish(context.Background(), 201, wrap.h(header("Content-Length", tt.declared)))
			again := e.Adapter().Begin(context.Background(), *charge(`"k"`, `{}`))
			if stored := again.Replayed; stored != tt.stored {
				t.Errorf("%s, Content-Length %s for 5 bytes: replayed %v, want %v", wrap.name, tt.declared, stored, tt.stored)
			}
			if again.Lock != nil {
				_ = again.Lock.Abandon(context.Background(), exchange.ReasonPanic)
			}
		}
	}
}

type valuesOnly struct{ h http.Header }

func (v valuesOnly) Values(name string) []string { return v.h.Values(name) }
