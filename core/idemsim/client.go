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
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// logical is one request a client means to make exactly once: it sends it
// with one key until it gets a definitive answer, retrying after
// timeouts, broken connections, 409, 429 and 5xx. Or it is one job (msg
// set, pay nil), which a queue delivers until a delivery ends with a
// definitive outcome (see consume).
type logical struct {
	name    string
	id      idem.ID
	pay     *payload
	msg     *jobMsg
	start   time.Time
	patient time.Duration // its timeout once the chaos is over
	crowd   bool          // a job of the crowd (see planCrowd)

	sent     int // attempts made, malformed keys included
	tries    int
	last     string
	done     bool // it got its definitive answer
	finished bool // its client stopped (done, or out of time)
}

// attempt is one sending of a logical request, or one delivery of a job
// (msg set, req nil).
type attempt struct {
	name     string
	idx      int // in world.attempts; -1 for a delivery
	lr       *logical
	id       idem.ID
	req      *request
	msg      *jobMsg
	keyLines []string // the Idempotency-Key field lines (nil: none)
	badKey   string   // the problem the policy answers for a malformed or missing key, "" for a valid one
	what     string   // what it sends, for traces
	deviant  bool     // another request than the logical one (a client's mistake)

	exec     *exec     // the handler or job run that served it, if any
	acquired *acquired // what the store answered the Engine's Acquire for it, if it answered
	token    string    // the lock the Engine asked the store for, if it asked
}

// target names what att asks for, in messages.
func (a *attempt) target() string {
	if a.msg != nil {
		return fmt.Sprintf("job %q", a.msg.name)
	}
	return a.req.method + " " + a.req.path
}

// bucket gathers the attempts that may be the same work as a: the same
// method, path and body signature, or the same job.
func (a *attempt) bucket() string {
	if a.msg != nil {
		return "job\x00" + a.msg.name + "\x00" + string(a.msg.payload)
	}
	return a.req.method + " " + a.req.path + "\x00" + a.req.signature()
}

// acquired is an answer of Acquire, as the Engine received it.
type acquired struct {
	rec idem.Record
	out idem.AcquireOutcome
}

func (w *world) planRequests() {
	r, p := w.rng, &w.p
	for i := range p.requests {
		lr := &logical{name: fmt.Sprintf("c%d", i)}
		if i > 0 && r.Float64() < 0.2 {
			// The same request sent twice, by two clients (a double click).
			o := w.reqs[r.IntN(len(w.reqs))]
			lr.id, lr.pay = o.id, o.pay
		} else {
			lr.id = idem.ID{Scope: scopes[p.scopeSet[r.IntN(p.scopes)]], Key: p.keyNames[r.IntN(p.keys)]}
			lr.pay = newPayload(r, i)
		}
		w.schedule(lr)
	}
}

// schedule draws when lr starts, in the burst or during the chaos, and
// sets how long its client waits once the chaos is over; then lr joins
// the run.
func (w *world) schedule(lr *logical) {
	r, p := w.rng, &w.p
	if p.burst {
		lr.start = epoch.Add(msBetween(r, 0, 10*time.Second))
	} else {
		lr.start = epoch.Add(msBetween(r, 0, p.chaos))
	}
	lr.patient = p.maxHandler + 3*p.storeTimeout + 10*time.Second
	w.reqs = append(w.reqs, lr)
}

func (w *world) newAttempt(lr *logical, deviant bool) *attempt {
	lr.sent++
	a := &attempt{name: fmt.Sprintf("%s.%d", lr.name, lr.sent), lr: lr, id: lr.id, deviant: deviant}
	a.req, a.what = lr.pay.render(w.rng, deviant)
	a.keyLines = keyLines(w.rng, lr.id.Key)
	a.idx = len(w.attempts)
	w.attempts = append(w.attempts, a)
	return a
}

// client sends lr until it gets a definitive answer; sometimes, once
// answered, it sends it once more, as a client that lost the answer does.
func (w *world) client(lr *logical) {
	s, r, p := w.s, w.rng, &w.p
	defer func() { lr.finished = true }()
	s.wait(lr.start, nil, nil)
	var aim *aimed
	for s.now.Before(w.deadline) {
		calm := !s.now.Before(w.calmAt)
		if !calm && r.Float64() < p.pBadKey {
			w.probeKey(lr)
		}
		att := w.newAttempt(lr, !calm && r.Float64() < p.pOtherBody)
		timeout, cut := lr.patient, -1
		if !calm && r.Float64() < p.pShortTimeout {
			timeout = msBetween(r, 200*time.Millisecond, 10*time.Second)
		}
		if !calm && r.Float64() < p.pCut {
			cut = r.IntN(8 << 10)
		}
		sl, travel := w.route(aim)
		aim = nil
		res := w.send(att, sl, travel, timeout, cut)
		lr.tries++
		lr.last = res.String()
		w.tracef("%s ← %s", att.name, res)
		w.m.checkAnswer(att, res)
		if res.definitive() && !att.deviant {
			lr.done = true
			w.tracef("%s is answered", lr.name)
			break
		}
		var pause time.Duration
		if res.resp != nil && res.resp.status >= 400 && !res.definitive() {
			pause = time.Second + msBetween(r, 0, time.Second) // Retry-After: 1
		} else {
			pause = msBetween(r, 100*time.Millisecond, 3*time.Second)
		}
		pause, aim = w.retryAfter(lr, pause)
		s.sleep(pause)
	}
	if lr.done && r.Float64() < p.pAgain {
		s.sleep(msBetween(r, 0, 2*p.lease))
		if !s.now.Before(w.deadline) {
			return
		}
		att := w.newAttempt(lr, s.now.Before(w.calmAt) && r.Float64() < p.pOtherBody)
		res := w.send(att, w.slots[r.IntN(len(w.slots))], msBetween(r, 0, 10*time.Millisecond), lr.patient, -1)
		w.tracef("%s ← %s (sent again after its answer)", att.name, res)
		w.m.checkAnswer(att, res)
	}
}

// probeKey sends lr once with a malformed or missing key: the policy
// answers 400, and nothing may run or be recorded for it.
func (w *world) probeKey(lr *logical) {
	r := w.rng
	att := w.newAttempt(lr, false)
	var why string
	att.keyLines, why, att.badKey = badKey(r, lr.id.Key)
	att.what += " with " + why
	res := w.send(att, w.slots[r.IntN(len(w.slots))], msBetween(r, 0, 10*time.Millisecond), lr.patient, -1)
	w.tracef("%s ← %s", att.name, res)
	w.m.checkAnswer(att, res)
}

// route picks the engine slot that lr's next sending goes to, and how
// long it travels: aim's, if it is aimed at an edge of its record, else
// any.
func (w *world) route(aim *aimed) (*slot, time.Duration) {
	sl, travel := w.slots[w.rng.IntN(len(w.slots))], msBetween(w.rng, 0, 10*time.Millisecond)
	if aim != nil {
		return aim.sl, aim.travel
	}
	return sl, travel
}

// retryAfter returns how long lr waits before its next sending (pause,
// unless it aims that sending at an edge of its record), and the aim.
func (w *world) retryAfter(lr *logical, pause time.Duration) (time.Duration, *aimed) {
	if w.rng.Float64() < w.p.pEdge {
		if a, at := w.aimAtEdge(lr); a != nil {
			return at.Sub(w.s.now), a
		}
	}
	return pause, nil
}

// aimed is a retry timed so that the Engine reads its clock for it at an
// instant where the record's state turns (its lease runs out, it expires).
type aimed struct {
	sl     *slot
	travel time.Duration
}

// aimAtEdge draws a retry of lr that reaches the Engine exactly when the
// record of its key turns, or just before or after, as the shadow of the
// store has it: the boundaries of the store contract are where a store
// that compares with < instead of <= goes wrong.
func (w *world) aimAtEdge(lr *logical) (*aimed, time.Time) {
	s, r := w.s, w.rng
	sh := w.m.shadow[lr.id]
	if sh == nil || sh.rec.State == 0 {
		return nil, time.Time{}
	}
	edges := []time.Time{sh.rec.ExpiresAt}
	if sh.rec.State == idem.InFlight {
		edges = append(edges, sh.rec.LeaseUntil)
	}
	edge := edges[r.IntN(len(edges))].Add([...]time.Duration{0, 0, -time.Millisecond, time.Millisecond}[r.IntN(4)])
	a := &aimed{sl: w.slots[r.IntN(len(w.slots))], travel: msBetween(r, 0, 10*time.Millisecond)}
	var skew time.Duration
	if n := a.sl.node; n != nil {
		skew = n.skew
	}
	at := edge.Add(-a.travel - skew)
	if !at.After(s.now) || !at.Before(w.deadline) || at.Sub(s.now) > 3*w.p.lease {
		return nil, time.Time{}
	}
	w.tracef("%s aims its retry at %s, where the record of %s turns", lr.name, w.at(edge), idName(lr.id))
	return a, at
}

// result is what a client saw of one attempt.
type result struct {
	kind string // "" for a response; else refused, timeout or reset
	resp *response
}

func (r result) String() string {
	if r.resp == nil {
		return r.kind
	}
	s := fmt.Sprintf("%d, %d bytes", r.resp.status, len(r.resp.body))
	if p := problemOf(r.resp); p != "" {
		s += " (" + p + ")"
	}
	if r.resp.hijacked {
		s += ", over the hijacked connection"
	}
	if len(r.resp.header[replayedMarker]) > 0 {
		s += ", marked replayed"
	}
	return s
}

// definitive: the answer a client keeps, not one it retries.
func (r result) definitive() bool {
	return r.resp != nil && policyDefinitive(r.resp.status)
}

// roundTrip is one HTTP request between a client and an engine process.
type roundTrip struct {
	req  *http.Request
	att  *attempt
	rw   *respWriter
	done bool // the server is done with it
	died bool // the server's process crashed while serving it
}

// send makes one attempt through engine slot sl, reaching it after
// travel, and waits up to timeout for the whole response; cut >= 0 breaks
// the connection after that many bytes of the response body.
func (w *world) send(att *attempt, sl *slot, travel, timeout time.Duration, cut int) result {
	s, r := w.s, w.rng
	n := sl.node
	w.tracef("%s → %s: %s %s %s, %s, timeout %s, cut %d", att.name, sl.name(), att.req.method, att.req.path, idName(att.id), att.what, ms(timeout), cut)
	if n == nil {
		s.sleep(msBetween(r, 0, 10*time.Millisecond))
		return result{kind: "refused: " + sl.name() + " is down"}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, att.req.method, att.req.path, bytes.NewReader(att.req.body))
	if err != nil {
		panic(err)
	}
	req.RequestURI = att.req.path
	if att.keyLines != nil {
		req.Header["Idempotency-Key"] = att.keyLines
	}
	if ct := att.req.contentType; ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if enc := att.req.contentEncoding; enc != "" {
		req.Header.Set("Content-Encoding", enc)
	}
	req.Header.Set("X-Sim-Attempt", strconv.Itoa(att.idx))
	ex := &roundTrip{req: req, att: att, rw: &respWriter{h: http.Header{}, cut: cut, declared: -1}}
	p := s.spawn(n, n.name()+" "+att.name, func() { w.serve(n, ex, travel) })
	p.tag = att
	s.wait(s.now.Add(timeout), nil, func() bool { return ex.done })
	if !ex.done {
		ex.rw.gone = true // the client hangs up: writes fail, the request's context ends
		return result{kind: "timeout"}
	}
	s.sleep(msBetween(r, 0, 10*time.Millisecond)) // the response travels back
	rw := ex.rw
	switch {
	case ex.died:
		return result{kind: "reset: " + n.name() + " crashed"}
	case rw.aborted:
		return result{kind: "reset: response aborted"}
	case rw.hijacked:
		return rw.overConn()
	case rw.broken:
		return result{kind: fmt.Sprintf("reset after %d bytes", len(rw.body))}
	case rw.declared > len(rw.body):
		return result{kind: fmt.Sprintf("reset after %d of the %d bytes its Content-Length declared", len(rw.body), rw.declared)}
	}
	resp := &response{status: rw.status, header: rw.sent, body: rw.body}
	if !rw.wrote {
		resp.status, resp.header = http.StatusOK, rw.h.Clone()
	}
	return result{resp: resp}
}

func (sl *slot) name() string { return fmt.Sprintf("e%d", sl.idx) }

// serve is the engine process's side of one exchange.
func (w *world) serve(n *node, ex *roundTrip, travel time.Duration) {
	ok := false
	defer func() {
		if r := recover(); r != nil {
			if r != http.ErrAbortHandler && r != errHandlerPanic {
				panic(r)
			}
			ex.rw.aborted = true // net/http closes the connection
		}
		ex.done = true
		ex.died = !ok && n.dead
		if t := w.m.tokens[ex.att.token]; t != nil {
			t.ended = true
		}
	}()
	w.s.sleep(travel)
	n.h.ServeHTTP(ex.rw, ex.req)
	ok = true
}

// respWriter is the connection to the client as the server writes to it,
// with net/http's rules: a body beyond the declared Content-Length is
// refused (http.ErrContentLength), one shorter than it breaks the
// connection, a 204 or 304 has no body (http.ErrBodyNotAllowed); Flush
// and Hijack work.
type respWriter struct {
	h        http.Header
	sent     http.Header // the header as it went out
	status   int
	wrote    bool
	declared int    // the Content-Length sent, or -1
	body     []byte // what reached the client
	cut      int    // the connection breaks after this many body bytes (-1: never)
	broken   bool   // a write failed: the connection was reset
	gone     bool   // the client hung up
	aborted  bool   // the server withheld the response (the Engine's abortResponse) or panicked
	flushed  bool
	hijacked bool
	raw      []byte // what was written to the hijacked connection
}

var errReset = errors.New("idemsim: connection reset by peer")

func (rw *respWriter) Header() http.Header { return rw.h }

func (rw *respWriter) WriteHeader(code int) {
	if rw.wrote || rw.hijacked {
		return
	}
	rw.status, rw.wrote, rw.sent = code, true, rw.h.Clone()
	if cl := rw.sent.Get("Content-Length"); cl != "" {
		if n, err := strconv.Atoi(cl); err == nil {
			rw.declared = n
		}
	}
}

func (rw *respWriter) Write(p []byte) (int, error) {
	if rw.hijacked {
		return 0, http.ErrHijacked
	}
	if !rw.wrote {
		rw.WriteHeader(http.StatusOK)
	}
	if rw.status == http.StatusNoContent || rw.status == http.StatusNotModified {
		return 0, http.ErrBodyNotAllowed
	}
	var err error
	if rw.declared >= 0 && len(rw.body)+len(p) > rw.declared {
		p, err = p[:rw.declared-len(rw.body)], http.ErrContentLength
	}
	n, werr := rw.deliver(&rw.body, p)
	if werr != nil {
		return n, werr
	}
	return n, err
}

// deliver appends p to what reached the client, unless the connection
// breaks first.
func (rw *respWriter) deliver(to *[]byte, p []byte) (int, error) {
	if rw.gone || rw.broken {
		rw.broken = true
		return 0, errReset
	}
	if rw.cut >= 0 && len(*to)+len(p) > rw.cut {
		n := rw.cut - len(*to)
		*to = append(*to, p[:n]...)
		rw.broken = true
		return n, errReset
	}
	*to = append(*to, p...)
	return len(p), nil
}

// Flush implements http.Flusher.
func (rw *respWriter) Flush() {
	if !rw.wrote {
		rw.WriteHeader(http.StatusOK)
	}
	rw.flushed = true
}

// Hijack implements http.Hijacker: the handler takes the connection over.
func (rw *respWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if rw.wrote || rw.hijacked {
		return nil, nil, errors.New("idemsim: the response was already written or hijacked")
	}
	rw.hijacked = true
	c := &simConn{rw: rw}
	return c, bufio.NewReadWriter(bufio.NewReader(c), bufio.NewWriter(c)), nil
}

// overConn is what the client read from the hijacked connection: an HTTP
// response the handler wrote itself.
func (rw *respWriter) overConn() result {
	if rw.broken {
		return result{kind: fmt.Sprintf("reset after %d bytes of the hijacked connection", len(rw.raw))}
	}
	hr, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(rw.raw)), nil)
	if err != nil {
		return result{kind: "reset: the hijacked connection carried no response"}
	}
	body, err := io.ReadAll(hr.Body)
	if err != nil {
		return result{kind: "reset: the hijacked connection closed mid-body"}
	}
	return result{resp: &response{status: hr.StatusCode, header: hr.Header, body: body, hijacked: true}}
}

// SetWriteDeadline lets the Engine withhold the response, as a
// deadline in the past does on a real connection.
func (rw *respWriter) SetWriteDeadline(time.Time) error {
	rw.aborted = true
	return nil
}

// simConn is a hijacked connection: what the handler writes reaches the
// client as the connection allows.
type simConn struct {
	rw     *respWriter
	closed bool
}

func (c *simConn) Read([]byte) (int, error) { return 0, io.EOF }
func (c *simConn) Write(p []byte) (int, error) {
	if c.closed {
		return 0, net.ErrClosed
	}
	return c.rw.deliver(&c.rw.raw, p)
}
func (c *simConn) Close() error                     { c.closed = true; return nil }
func (c *simConn) LocalAddr() net.Addr              { return simAddr{} }
func (c *simConn) RemoteAddr() net.Addr             { return simAddr{} }
func (c *simConn) SetDeadline(time.Time) error      { return nil }
func (c *simConn) SetReadDeadline(time.Time) error  { return nil }
func (c *simConn) SetWriteDeadline(time.Time) error { return nil }

type simAddr struct{}

func (simAddr) Network() string { return "sim" }
func (simAddr) String() string  { return "sim" }
