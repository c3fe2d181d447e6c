//go:build !race

// Allocation counts are checked only without the race detector, which makes
// sync.Pool drop items at random; scripts/test-all runs this pass too.

package idem_test

import (
	"context"
	"net/http"
	"slices"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/internal/costfloor"
)

// A handler that never looks at its context's cancellation costs nothing
// for it: the request's context (cancellable, as net/http's is) gets no
// child registered, and the first request allocates no more than with a
// context that cannot be cancelled.
func TestUnwatchedLockContextAllocs(t *testing.T) {
	e := idem.New(quietConfig(costfloor.NothingStored()))
	req := charge(`"k"`, `{"amount":100}`)
	run := func(ctx context.Context) float64 {
		return testing.AllocsPerRun(200, func() {
			r := *req
			d := e.Adapter().Begin(ctx, r)
			_ = d.Lock.Context().Value(ctxKey{})
			_ = d.Lock.Finish(ctx, 201, nil)
		})
	}
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	plain, withParent := run(context.Background()), run(cancellable)
	if withParent != plain {
		t.Fatalf("first request: %v allocations under a cancellable request context, %v under one that is not", withParent, plain)
	}
	if plain > 2 {
		t.Fatalf("first request: %v allocations by the Engine, want at most 2 (the Lock and its token)", plain)
	}
	// A new request context each time, as net/http makes: asking it for
	// Done would make it allocate its channel.
	made := testing.AllocsPerRun(200, func() {
		_, cancel := context.WithCancel(context.Background())
		cancel()
	})
	fresh := testing.AllocsPerRun(200, func() {
		ctx, cancel := context.WithCancel(context.Background())
		r := *req
		d := e.Adapter().Begin(ctx, r)
		_ = d.Lock.Finish(ctx, 201, nil)
		cancel()
	})
	if fresh-made != plain {
		t.Fatalf("first request: %v allocations under a new cancellable request context, %v otherwise", fresh-made, plain)
	}
}

// Finish gathers the replayable headers into the Lock: storing a response
// with its Content-Type and Location allocates no more than one without
// headers, whether the adapter hands over an http.Header or a
// headerAppender.
func TestFinishHeaderAllocs(t *testing.T) {
	e := idem.New(quietConfig(costfloor.NothingStored()))
	req := charge(`"k"`, `{"amount":100}`)
	run := func(h exchange.HeaderReader) float64 {
		return testing.AllocsPerRun(200, func() {
			r := *req
			d := e.Adapter().Begin(context.Background(), r)
			_ = d.Lock.Finish(context.Background(), 201, h)
		})
	}
	h := header("Content-Type", "application/json", "Location", "/v1/charges/ch_1")
	none, plain, appending := run(nil), run(h), run(appendingHeader{h})
	if plain != none || appending != none {
		t.Fatalf("Finish: %v allocations with an http.Header, %v with a headerAppender, %v without headers", plain, appending, none)
	}
}

type appendingHeader struct{ h http.Header }

func (a appendingHeader) Values(name string) []string { return slices.Clone(a.h.Values(name)) }
func (a appendingHeader) AppendValues(dst []string, name string) []string {
	return append(dst, a.h.Values(name)...)
}
