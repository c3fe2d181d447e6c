package idemsim

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
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

	contentType string // "" for none
	location    bool
	links       int // Link values (replayed)
	costs       int // X-Request-Cost values (replayed)
	cookie      bool
	traceID     bool // an X-Trace header, which is not replayed
	declare     int  // 0: no Content-Length; 1: its length; 2: too short; 3: too long
	flush       bool // streams: flushes after its first piece
	hijack      bool // takes the connection over and writes its response itself
	controller  bool // flushes or hijacks through http.ResponseController
}

// planExec draws what one run of the handler does.
func (w *world) planExec() execPlan {
	calm := !w.s.now.Before(w.calmAt)
	var pl execPlan
	pl.work, pl.react = w.planWork(calm)
	w.planOutcome(&pl, calm)
	w.planHeaders(&pl)
	return pl
}

// planWork draws the spells of work of one run, and how long it takes to
// stop once its context is cancelled. Once the chaos is over, a run ends
// well within the handler timeout.
func (w *world) planWork(calm bool) ([]time.Duration, time.Duration) {
	r, p := w.rng, &w.p
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
	return w.spellsOf(total), msBetween(r, 0, p.react)
}

// spellsOf draws the spells, one to five, in which a run works for total.
func (w *world) spellsOf(total time.Duration) (work []time.Duration) {
	r := w.rng
	for k := 1 + r.IntN(5); k > 0; k-- {
		d := total / time.Duration(k)
		if k > 1 {
			d = msBetween(r, 0, d)
		}
		d = d.Truncate(time.Millisecond)
		work = append(work, d)
		total -= d
	}
	return work
}

// planOutcome draws the size and status of a run's response, and whether
// it panics or ignores its context.
func (w *world) planOutcome(pl *execPlan, calm bool) {
	r, p := w.rng, &w.p
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
	case x < 0.2:
		pl.status = [...]int{202, 204, 303, 404}[r.IntN(4)]
	case calm:
	case x < 0.3:
		pl.status = [...]int{500, 502, 503, 409, 429, 408, 425, 422}[r.IntN(8)]
	}
	pl.panics = !calm && r.Float64() < p.pPanic
	pl.deaf = !calm && r.Float64() < p.pDeaf
}

// planHeaders draws the headers of a run's response and how it is sent.
func (w *world) planHeaders(pl *execPlan) {
	r, p := w.rng, &w.p
	pl.contentType = [...]string{"application/json", "application/json", "application/json; charset=utf-8", ""}[r.IntN(4)]
	pl.location = r.Float64() < 0.3
	if r.Float64() < 0.4 {
		pl.links = 1 + r.IntN(3)
	}
	if r.Float64() < 0.2 {
		pl.costs = 1 + r.IntN(2)
	}
	pl.cookie = r.Float64() < 0.2
	pl.traceID = r.Float64() < 0.3
	if r.Float64() < 0.3 {
		pl.declare = [...]int{1, 1, 2, 3}[r.IntN(4)]
	}
	switch x := r.Float64(); {
	case x < p.pStream:
		pl.flush = true
	case x < 2*p.pStream:
		pl.hijack = true
	}
	pl.controller = r.IntN(2) == 0
	if pl.status == http.StatusNoContent {
		pl.size, pl.contentType, pl.declare, pl.location = 0, "", 0, true
	}
	if pl.status == http.StatusSeeOther {
		pl.location = true
	}
}

// handle is the application's handler: it does its work in spells,
// stopping when its context is cancelled (within plan.react), then writes
// its response in pieces, with headers of several values, some replayed
// and some not, sometimes a Content-Length that is wrong; some responses
// are streamed (flushed), some written over a hijacked connection.
func (w *world) handle(n *node, rw http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	att, held, ok := w.admit(r)
	if !ok {
		return
	}
	x := w.m.startExec(held.ID, held.Token, n, att)
	pl := w.planExec()
	w.tracef("X%d starts for %s as %s: %s of work, then %d with %d bytes%s", x.n, idName(x.id), w.m.label(held.Token), ms(sum(pl.work)), pl.status, pl.size, pl.extras())
	if !w.spells(ctx, x, pl.work, pl.react, pl.deaf) {
		w.stopped(ctx, x, rw)
		return
	}
	if pl.panics {
		w.m.endExec(x, "panicked")
		panic(errHandlerPanic)
	}
	if !w.writeWork(ctx, x, "the handler's work", "the request's transaction") {
		return
	}
	out := handlerBody(x, pl.size)
	if pl.size == 0 && pl.status == http.StatusNoContent {
		out = nil
	}
	sent := setHeaders(rw.Header(), x, pl, out)
	if pl.hijack && w.hijacked(x, rw, pl, out, sent) {
		return
	}
	w.respond(rw, pl, out, sent)
	w.m.produce(x, sent)
	w.m.endExec(x, fmt.Sprintf("returned %d with %d bytes", pl.status, len(sent.body)))
}

// admit checks what the handler is given for a request: it runs only for
// a valid key, holding that key, with the request's own body.
func (w *world) admit(r *http.Request) (*attempt, idem.Held, bool) {
	att := w.attemptOf(r)
	if att.badKey != "" {
		w.violate(invPolicy, "%s: the handler runs for a request with %s", att.name, att.what)
	}
	held, ok := idem.HeldKey(r.Context())
	if !ok {
		w.violate(invOneAtATime, "%s: the handler runs without holding its key", att.name)
		return att, held, false
	}
	if held.ID != att.id {
		w.violate(invOneAtATime, "%s: the handler holds %s, not its own key %s", att.name, idName(held.ID), idName(att.id))
	}
	body, err := io.ReadAll(r.Body)
	if err != nil || !bytes.Equal(body, att.req.body) {
		w.violate(invReplay, "%s: the handler was given another body than the request's (%v)", att.name, err)
	}
	return att, held, true
}

// spells does x's work, spell by spell, and reports false if it stopped
// first because ctx was cancelled. A deaf run never notices.
func (w *world) spells(ctx context.Context, x *exec, work []time.Duration, react time.Duration, deaf bool) bool {
	x.ctx = ctx
	if deaf {
		x.exempt = "ignores its context"
		ctx = context.WithoutCancel(ctx)
	}
	for _, d := range work {
		if ok, woke := w.work(ctx, d, react); !ok {
			w.m.checkLeaseLost(x, ctx, woke)
			return false
		}
	}
	return true
}

// stopped answers for a handler that stopped when its context was
// cancelled.
func (w *world) stopped(ctx context.Context, x *exec, rw http.ResponseWriter) {
	w.m.endExec(x, "stopped: "+context.Cause(ctx).Error())
	rw.Header().Set("Content-Type", "text/plain")
	rw.WriteHeader(http.StatusServiceUnavailable)
	wrote, _ := io.WriteString(rw, "stopped\n")
	w.m.produce(x, &response{status: http.StatusServiceUnavailable, header: http.Header{"Content-Type": {"text/plain"}},
		body: []byte("stopped\n")[:wrote], declared: -1})
}

// writeWork does x's business work, if the target has some (Effects), in
// the transaction ctx carries, and reports false if it failed.
func (w *world) writeWork(ctx context.Context, x *exec, what, tx string) bool {
	fx := w.effects
	if fx == nil {
		return true
	}
	if err := fx.Write(ctx, x.n); err != nil {
		w.m.ownError(what, err)
		return false
	}
	x.wrote = true
	w.tracef("X%d wrote its work in %s", x.n, tx)
	return true
}

// setHeaders writes the headers pl draws for x's response into h, and
// returns the response as it is being sent.
func setHeaders(h http.Header, x *exec, pl execPlan, out []byte) *response {
	if pl.contentType != "" {
		h.Set("Content-Type", pl.contentType)
	}
	if pl.location {
		h.Set("Location", fmt.Sprintf("/orders/X%d", x.n))
	}
	for k := range pl.links {
		// One field line may hold several links: a replay must keep the
		// lines as they were, each whole.
		h.Add("Link", fmt.Sprintf(`</orders/X%d/items/%d>; rel="item", </orders/X%d>; rel="up"`, x.n, k, x.n))
	}
	for k := range pl.costs {
		h.Add("X-Request-Cost", fmt.Sprintf("units=%d;step=%d", x.n, k))
	}
	if pl.cookie {
		h.Add("Set-Cookie", fmt.Sprintf("session=X%d; Path=/; HttpOnly", x.n))
	}
	if pl.traceID {
		h.Set("X-Trace", fmt.Sprintf("trace-X%d", x.n))
	}
	if pl.declare > 0 {
		h.Set("Content-Length", strconv.Itoa(len(out)+[...]int{0, 0, -1 - len(out)/2, 1 + len(out)/3}[pl.declare]))
	}
	sent := &response{status: pl.status, header: h.Clone(), declared: -1}
	if pl.declare > 0 {
		sent.declared, _ = strconv.Atoi(h.Get("Content-Length"))
	}
	return sent
}

// respond writes the status and out in pl.pieces pieces, a short while
// apart, flushing after the first if pl says so; sent gets what was
// written.
func (w *world) respond(rw http.ResponseWriter, pl execPlan, out []byte, sent *response) {
	rw.WriteHeader(pl.status)
	write := func(p []byte) {
		wrote, _ := rw.Write(p) // the adapter reports success even to a client gone
		sent.body = append(sent.body, p[:wrote]...)
		if pl.flush && !sent.flushed {
			sent.flushed = true
			if pl.controller {
				_ = http.NewResponseController(rw).Flush()
			} else {
				rw.(http.Flusher).Flush()
			}
		}
	}
	rest := out
	for k := pl.pieces; k > 1 && len(rest) > 0; k-- {
		n := w.rng.IntN(len(rest) + 1)
		write(rest[:n])
		rest = rest[n:]
		w.s.sleep(msBetween(w.rng, 0, 50*time.Millisecond))
	}
	if len(rest) > 0 || pl.flush && !sent.flushed {
		write(rest)
	}
}

// hijacked takes the connection over and writes the response on it, as a
// handler that upgrades the connection or answers in a protocol of its
// own does; it reports false if the connection cannot be hijacked.
func (w *world) hijacked(x *exec, rw http.ResponseWriter, pl execPlan, out []byte, sent *response) bool {
	var (
		conn net.Conn
		brw  *bufio.ReadWriter
		err  error
	)
	if pl.controller {
		conn, brw, err = http.NewResponseController(rw).Hijack()
	} else if hj, ok := rw.(http.Hijacker); ok {
		conn, brw, err = hj.Hijack()
	} else {
		err = errors.New("not a Hijacker")
	}
	if err != nil {
		w.tracef("X%d cannot hijack the connection: %v", x.n, err)
		return false
	}
	sent.hijacked = true
	sent.header.Del("Content-Length")
	fmt.Fprintf(brw, "HTTP/1.1 %d %s\r\n", pl.status, http.StatusText(pl.status))
	_ = sent.header.Write(brw)
	fmt.Fprintf(brw, "Content-Length: %d\r\nConnection: close\r\n\r\n", len(out))
	_, _ = brw.Write(out)
	_ = brw.Flush()
	_ = conn.Close()
	sent.body = out
	w.m.produce(x, sent)
	w.m.endExec(x, fmt.Sprintf("returned %d with %d bytes over the hijacked connection", pl.status, len(out)))
	return true
}

func (pl execPlan) extras() string {
	var s []string
	switch {
	case pl.hijack:
		s = append(s, "hijacks")
	case pl.flush:
		s = append(s, "flushes")
	}
	if pl.declare > 1 {
		s = append(s, "declares a wrong Content-Length")
	}
	if pl.links > 1 || pl.costs > 1 {
		s = append(s, "headers of several values")
	}
	if len(s) == 0 {
		return ""
	}
	return " (" + strings.Join(s, ", ") + ")"
}

// work spends d of virtual time on the handler's work, and reports false
// if the handler stopped because its context was cancelled first, with
// the instant that happened (the handler stops within react of it).
func (w *world) work(ctx context.Context, d, react time.Duration) (ok bool, woke time.Time) {
	s := w.s
	end := s.now.Add(d)
	s.wait(end, ctx, nil)
	if !s.now.Before(end) {
		return true, s.now
	}
	woke = s.now
	// The handler notices at its next check of the context, within react.
	s.sleep(min(react, end.Sub(s.now)))
	return false, woke
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
