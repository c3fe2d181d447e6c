package idemsim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// logical is one request a client means to make exactly once: it sends it
// with one key until it gets a definitive answer, retrying after
// timeouts, broken connections, 409, 429 and 5xx.
type logical struct {
	name    string
	id      idem.ID
	path    string
	body    []byte
	other   []byte // the body a client sends by mistake with the same key
	start   time.Time
	patient time.Duration // its timeout once the chaos is over

	tries    int
	last     string
	done     bool // it got its definitive answer
	finished bool // its client stopped (done, or out of time)
}

// attempt is one sending of a logical request.
type attempt struct {
	name     string
	lr       *logical
	id       idem.ID
	fp       idem.Fingerprint
	body     []byte
	bodyName string
	deviant  bool // sent with the other body
}

func (w *world) planRequests() {
	r, p := w.rng, &w.p
	for i := range p.requests {
		lr := &logical{name: fmt.Sprintf("c%d", i)}
		if i > 0 && r.Float64() < 0.2 {
			// The same request sent twice, by two clients (a double click).
			o := w.reqs[r.IntN(len(w.reqs))]
			lr.id, lr.path, lr.body, lr.other = o.id, o.path, o.body, o.other
		} else {
			lr.id = idem.ID{Scope: scopes[p.scopeSet[r.IntN(p.scopes)]], Key: p.keyNames[r.IntN(p.keys)]}
			lr.path = [...]string{"/orders", "/orders?express=1", "/refunds"}[r.IntN(3)]
			lr.body = fmt.Appendf(nil, `{"request":%d,"amount":%d}`, i, 100+r.IntN(10000))
			lr.other = fmt.Appendf(nil, `{"request":%d,"amount":%d,"note":"sent by mistake"}`, i, r.IntN(100))
		}
		if p.burst {
			lr.start = epoch.Add(msBetween(r, 0, 10*time.Second))
		} else {
			lr.start = epoch.Add(msBetween(r, 0, p.chaos))
		}
		lr.patient = p.maxHandler + 3*p.storeTimeout + 10*time.Second
		w.reqs = append(w.reqs, lr)
	}
}

func (w *world) newAttempt(lr *logical, deviant bool) *attempt {
	a := &attempt{name: fmt.Sprintf("%s.%d", lr.name, lr.tries+1), lr: lr, id: lr.id, body: lr.body, bodyName: "its body", deviant: deviant}
	if deviant {
		a.body, a.bodyName = lr.other, "another body"
	}
	a.fp = idem.DefaultFingerprint(idem.Request{Method: http.MethodPost, Path: lr.path, ContentType: "application/json", Body: a.body})
	w.attempts = append(w.attempts, a)
	return a
}

// client sends lr until it gets a definitive answer.
func (w *world) client(lr *logical) {
	s, r, p := w.s, w.rng, &w.p
	defer func() { lr.finished = true }()
	s.wait(lr.start, nil, nil)
	for s.now.Before(w.deadline) {
		calm := !s.now.Before(w.calmAt)
		att := w.newAttempt(lr, !calm && r.Float64() < p.pOtherBody)
		timeout, cut := lr.patient, -1
		if !calm && r.Float64() < p.pShortTimeout {
			timeout = msBetween(r, 200*time.Millisecond, 10*time.Second)
		}
		if !calm && r.Float64() < p.pCut {
			cut = r.IntN(8 << 10)
		}
		sl := w.slots[r.IntN(len(w.slots))]
		res := w.send(att, sl, timeout, cut)
		lr.tries++
		lr.last = res.String()
		w.tracef("%s ← %s", att.name, res)
		if res.resp != nil && res.replayed {
			w.m.checkReplay(att, res.resp)
		}
		if res.definitive() && !att.deviant {
			lr.done = true
			w.tracef("%s is answered", lr.name)
			return
		}
		if res.resp != nil && res.resp.status >= 400 && !res.definitive() {
			s.sleep(time.Second + msBetween(r, 0, time.Second)) // Retry-After: 1
		} else {
			s.sleep(msBetween(r, 100*time.Millisecond, 3*time.Second))
		}
	}
}

// result is what a client saw of one attempt.
type result struct {
	kind     string // "" for a response; else refused, timeout or reset
	resp     *response
	replayed bool
}

func (r result) String() string {
	if r.resp == nil {
		return r.kind
	}
	s := fmt.Sprintf("%d, %d bytes", r.resp.status, len(r.resp.body))
	if r.replayed {
		s += ", replayed"
	}
	return s
}

// definitive: the answer a client keeps, not one it retries.
func (r result) definitive() bool {
	if r.resp == nil {
		return false
	}
	st := r.resp.status
	return st < 500 && st != http.StatusRequestTimeout && st != http.StatusConflict &&
		st != http.StatusTooEarly && st != http.StatusTooManyRequests
}

// exchange is one HTTP request between a client and an engine process.
type exchange struct {
	req   *http.Request
	rw    *respWriter
	token string // the lock the request acquired, if any
	done  bool   // the server is done with it
	died  bool   // the server's process crashed while serving it
}

// send makes one attempt through engine slot sl and waits up to timeout
// for the whole response; cut >= 0 breaks the connection after that many
// bytes of the response body.
func (w *world) send(att *attempt, sl *slot, timeout time.Duration, cut int) result {
	s, r := w.s, w.rng
	n := sl.node
	w.tracef("%s → %s: %s %s, %s, timeout %s, cut %d", att.name, sl.name(), att.lr.path, idName(att.id), att.bodyName, ms(timeout), cut)
	if n == nil {
		s.sleep(msBetween(r, 0, 10*time.Millisecond))
		return result{kind: "refused: " + sl.name() + " is down"}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, att.lr.path, bytes.NewReader(att.body))
	if err != nil {
		panic(err)
	}
	req.RequestURI = att.lr.path
	req.Header.Set("Idempotency-Key", strconv.Quote(att.id.Key))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Sim-Attempt", strconv.Itoa(len(w.attempts)-1))
	ex := &exchange{req: req, rw: &respWriter{h: http.Header{}, cut: cut}}
	travel := msBetween(r, 0, 10*time.Millisecond)
	p := s.spawn(n, n.name()+" "+att.name, func() { w.serve(n, ex, travel) })
	p.tag = ex
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
	case rw.broken:
		return result{kind: fmt.Sprintf("reset after %d bytes", len(rw.body))}
	}
	resp := &response{status: rw.status, contentType: rw.sent.Get("Content-Type"), body: rw.body}
	if !rw.wrote {
		resp.status = http.StatusOK
	}
	return result{resp: resp, replayed: rw.sent.Get(idem.ReplayedHeader) == "true"}
}

func (sl *slot) name() string { return fmt.Sprintf("e%d", sl.idx) }

// serve is the engine process's side of one exchange.
func (w *world) serve(n *node, ex *exchange, travel time.Duration) {
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
		if t := w.m.tokens[ex.token]; t != nil {
			t.ended = true
		}
	}()
	w.s.sleep(travel)
	n.h.ServeHTTP(ex.rw, ex.req)
	ok = true
}

// respWriter is the connection to the client as the server writes to it.
type respWriter struct {
	h       http.Header
	sent    http.Header // the header as it went out
	status  int
	wrote   bool
	body    []byte // what reached the client
	cut     int    // the connection breaks after this many body bytes (-1: never)
	broken  bool   // a write failed: the connection was reset
	gone    bool   // the client hung up
	aborted bool   // the server withheld the response (idem.AbortResponse) or panicked
}

var errReset = errors.New("idemsim: connection reset by peer")

func (rw *respWriter) Header() http.Header { return rw.h }

func (rw *respWriter) WriteHeader(code int) {
	if rw.wrote {
		return
	}
	rw.status, rw.wrote, rw.sent = code, true, rw.h.Clone()
}

func (rw *respWriter) Write(p []byte) (int, error) {
	if !rw.wrote {
		rw.WriteHeader(http.StatusOK)
	}
	if rw.gone || rw.broken {
		rw.broken = true
		return 0, errReset
	}
	if rw.cut >= 0 && len(rw.body)+len(p) > rw.cut {
		n := rw.cut - len(rw.body)
		rw.body = append(rw.body, p[:n]...)
		rw.broken = true
		return n, errReset
	}
	rw.body = append(rw.body, p...)
	return len(p), nil
}

// SetWriteDeadline lets idem.AbortResponse withhold the response, as a
// deadline in the past does on a real connection.
func (rw *respWriter) SetWriteDeadline(time.Time) error {
	rw.aborted = true
	return nil
}
