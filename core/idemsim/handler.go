package idemsim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// errHandlerPanic is what a simulated handler panics with.
var errHandlerPanic = errors.New("idemsim: the handler panicked")

// execPlan is what one run of the handler does.
type execPlan struct {
	work   []time.Duration // spells of work, between which it checks its context
	react  time.Duration   // how long it takes to stop once its context is cancelled
	status int
	size   int
	pieces int
	panics bool
	deaf   bool // ignores its context
}

func (w *world) planExec() execPlan {
	r, p := w.rng, &w.p
	calm := !w.s.now.Before(w.calmAt)
	var pl execPlan
	var total time.Duration
	switch x := r.Float64(); {
	case x < 0.5:
		total = msBetween(r, 0, 2*time.Second)
	case x < 0.8:
		total = msBetween(r, 0, min(p.lease, p.maxHandler))
	default:
		total = msBetween(r, min(p.lease, p.maxHandler), p.maxHandler)
	}
	if calm && p.handlerTimeout > 0 {
		total = min(total, p.handlerTimeout/2)
	}
	for k := 1 + r.IntN(5); k > 0; k-- {
		d := total / time.Duration(k)
		if k > 1 {
			d = msBetween(r, 0, d)
		}
		d = d.Truncate(time.Millisecond)
		pl.work = append(pl.work, d)
		total -= d
	}
	pl.react = msBetween(r, 0, p.react)
	switch x := r.Float64(); {
	case x < 0.05:
		pl.size = 0
	case x < 0.65:
		pl.size = r.IntN(2000)
	case x < 0.95:
		pl.size = 2000 + r.IntN(p.maxBody-2000)
	default:
		pl.size = p.maxBody + 1 + r.IntN(4096) // too large to store
	}
	pl.pieces = 1 + r.IntN(4)
	pl.status = 201
	switch x := r.Float64(); {
	case x < 0.1:
		pl.status = 200
	case x < 0.15:
		pl.status = 400
	case calm:
	case x < 0.25:
		pl.status = [...]int{500, 502, 503, 409, 429, 408, 404, 422}[r.IntN(8)]
	}
	pl.panics = !calm && r.Float64() < p.pPanic
	pl.deaf = !calm && r.Float64() < p.pDeaf
	return pl
}

// handle is the application's handler: it does its work in spells,
// stopping when its context is cancelled (within plan.react), then writes
// its response in pieces.
func (w *world) handle(n *node, rw http.ResponseWriter, r *http.Request) {
	s := w.s
	ctx := r.Context()
	att := w.attemptOf(r)
	held, ok := idem.HeldKey(ctx)
	if !ok {
		w.violate(invOneAtATime, "%s: the handler runs without holding its key", att.name)
		return
	}
	if held.ID != att.id {
		w.violate(invOneAtATime, "%s: the handler holds %s, not its own key %s", att.name, idName(held.ID), idName(att.id))
	}
	body, err := io.ReadAll(r.Body)
	if err != nil || !bytes.Equal(body, att.body) {
		w.violate(invReplay, "%s: the handler was given another body than the request's (%v)", att.name, err)
	}
	x := w.m.startExec(held.ID, held.Token, n, att)
	pl := w.planExec()
	w.tracef("X%d starts for %s as %s: %s of work, then %d with %d bytes", x.n, idName(x.id), w.m.label(held.Token), ms(sum(pl.work)), pl.status, pl.size)
	wctx := ctx
	if pl.deaf {
		x.exempt = "ignores its context"
		wctx = context.WithoutCancel(ctx)
	}
	for _, d := range pl.work {
		if !w.work(wctx, d, pl.react) {
			w.m.endExec(x, "stopped: "+context.Cause(ctx).Error())
			rw.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(rw, "stopped\n")
			return
		}
	}
	if pl.panics {
		w.m.endExec(x, "panicked")
		panic(errHandlerPanic)
	}
	if fx := w.effects; fx != nil {
		if err := fx.Write(ctx, x.n); err != nil {
			w.m.ownError("the handler's work", err)
			return
		}
		x.wrote = true
		w.tracef("X%d wrote its work in the request's transaction", x.n)
	}
	out := handlerBody(x, pl.size)
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(pl.status)
	rest := out
	for k := pl.pieces; k > 1 && len(rest) > 0; k-- {
		n := w.rng.IntN(len(rest) + 1)
		_, _ = rw.Write(rest[:n]) // the adapter reports success even to a client gone
		rest = rest[n:]
		s.sleep(msBetween(w.rng, 0, 50*time.Millisecond))
	}
	_, _ = rw.Write(rest)
	w.m.produce(x, &response{status: pl.status, contentType: "application/json", body: out})
	w.m.endExec(x, fmt.Sprintf("returned %d with %d bytes", pl.status, len(out)))
}

// work spends d of virtual time on the handler's work, and reports false
// if the handler stopped because its context was cancelled first.
func (w *world) work(ctx context.Context, d, react time.Duration) bool {
	s := w.s
	end := s.now.Add(d)
	s.wait(end, ctx, nil)
	if !s.now.Before(end) {
		return true
	}
	// The handler notices at its next check of the context, within react.
	s.sleep(min(react, end.Sub(s.now)))
	return false
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

// handlerBody is an execution's response body, size bytes long (or its
// header alone, if longer): it names the execution and its key, so that a
// replay of another key's, another tenant's or a cut response never
// matches one this key's handlers produced.
func handlerBody(x *exec, size int) []byte {
	b := fmt.Appendf(nil, `{"scope":%q,"key":%q,"execution":%d,"pad":"`, x.id.Scope, x.id.Key, x.n)
	for i := 0; len(b) < size-2; i++ {
		b = append(b, byte('a'+(i*7+x.n)%26))
	}
	return append(b, `"}`...)
}
