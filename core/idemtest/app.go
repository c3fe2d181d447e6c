package idemtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// app is the plain net/http application the HTTP suite mounts behind each
// adapter. It counts how often its handlers really run.
type app struct {
	calls     atomic.Int64
	panicking atomic.Bool
	entered   chan struct{} // one send per /slow or /ctx request that started
	release   chan struct{} // closed to let /slow and /ctx requests finish
	closeOnce sync.Once
	midBody   chan struct{}   // one send per /big?pause=1 request that wrote its first part
	resume    chan struct{}   // one receive lets such a request write the rest
	bigDone   chan bigOutcome // one send per /big?pause=1 request that wrote everything
}

func newApp() *app {
	return &app{entered: make(chan struct{}, 100), release: make(chan struct{}),
		midBody: make(chan struct{}, 10), resume: make(chan struct{}, 10), bigDone: make(chan bigOutcome, 10)}
}

func (a *app) releaseSlow() { a.closeOnce.Do(func() { close(a.release) }) }

// appCall is what every route of the app gets of its request.
type appCall struct {
	n     int64 // the call's number, from 1
	body  []byte
	query url.Values
}

// appRoutes are the app's routes by path; any other path answers with
// echoRequest.
var appRoutes = map[string]func(*app, http.ResponseWriter, *http.Request, appCall){
	"/status":       (*app).serveStatus,
	"/panic":        (*app).servePanic,
	"/stream":       (*app).serveStream,
	"/big":          (*app).serveBig,
	"/hijack":       (*app).serveHijack,
	"/switch":       (*app).serveSwitch,
	"/hints":        (*app).serveHints,
	"/unwrap-flush": (*app).serveUnwrapFlush,
	"/late-header":  (*app).serveLateHeader,
	"/status-late":  (*app).serveStatusLate,
	"/status-twice": (*app).serveStatusTwice,
	"/links":        (*app).serveLinks,
	"/held":         (*app).serveHeld,
	"/ctx":          (*app).serveCtx,
	"/slow":         (*app).serveSlow,
}

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c := appCall{n: a.calls.Add(1), query: r.URL.Query()}
	var err error
	if c.body, err = io.ReadAll(r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if route, ok := appRoutes[r.URL.Path]; ok {
		route(a, w, r, c)
		return
	}
	a.echoRequest(w, r, c)
}

// echoRequest answers with what the request was and the headers a replay
// must keep (or drop).
func (a *app) echoRequest(w http.ResponseWriter, r *http.Request, c appCall) {
	sum := sha256.Sum256(c.body)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Location", fmt.Sprintf("/charges/ch_%d", c.n))
	h.Set("Set-Cookie", fmt.Sprintf("session=s%d; HttpOnly", c.n))
	h.Set("X-Extra", fmt.Sprintf("extra-%d", c.n))
	status := http.StatusCreated
	if r.Method != http.MethodPost && r.Method != http.MethodPatch {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"call":%d,"method":%q,"path":%q,"body_len":%d,"body_sha256":%q}`,
		c.n, r.Method, r.URL.RequestURI(), len(c.body), hex.EncodeToString(sum[:8]))
}

// serveStatus answers with the status in the query's code.
func (a *app) serveStatus(w http.ResponseWriter, _ *http.Request, c appCall) {
	code, _ := strconv.Atoi(c.query.Get("code"))
	if c.query.Get("bare") == "1" { // neither a Content-Type nor a body
		w.WriteHeader(code)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	if code != http.StatusNoContent && code != http.StatusNotModified {
		fmt.Fprintf(w, "status %d, call %d", code, c.n)
	}
}

// servePanic panics while the app is set to, and answers as any route
// otherwise.
func (a *app) servePanic(w http.ResponseWriter, r *http.Request, c appCall) {
	if a.panicking.Load() {
		panic("idemtest: handler panic")
	}
	a.echoRequest(w, r, c)
}

// serveStream flushes its first part before writing the second.
func (a *app) serveStream(w http.ResponseWriter, _ *http.Request, c appCall) {
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(w, "data: part 1 of call %d\n\n", c.n)
	http.NewResponseController(w).Flush()
	fmt.Fprintf(w, "data: part 2 of call %d\n\n", c.n)
}

// serveHijack takes the connection over and answers on it itself.
func (a *app) serveHijack(w http.ResponseWriter, _ *http.Request, c appCall) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		http.Error(w, "cannot hijack: "+err.Error(), http.StatusInternalServerError)
		return
	}
	body := fmt.Sprintf("hijacked by call %d", c.n)
	fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	buf.Flush()
	conn.Close()
}

// serveSwitch answers a final 101 with nothing after it: the connection is
// no longer HTTP, whatever follows.
func (a *app) serveSwitch(w http.ResponseWriter, _ *http.Request, _ appCall) {
	w.WriteHeader(http.StatusSwitchingProtocols)
}

// serveHints sends 103 Early Hints before its final response.
func (a *app) serveHints(w http.ResponseWriter, _ *http.Request, c appCall) {
	w.Header().Set("Link", "</style.css>; rel=preload; as=style")
	w.WriteHeader(http.StatusEarlyHints)
	w.Header().Del("Link")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"call":%d}`, c.n)
}

// unwrapOnly is a ResponseWriter that reaches the one below it only
// through Unwrap: no Flush or Hijack of its own.
type unwrapOnly struct{ w http.ResponseWriter }

func (u unwrapOnly) Header() http.Header         { return u.w.Header() }
func (u unwrapOnly) Write(p []byte) (int, error) { return u.w.Write(p) }
func (u unwrapOnly) WriteHeader(code int)        { u.w.WriteHeader(code) }
func (u unwrapOnly) Unwrap() http.ResponseWriter { return u.w }

// serveUnwrapFlush flushes through a writer that offers only Unwrap, as
// many middleware writers do: http.ResponseController finds the flusher
// below it.
func (a *app) serveUnwrapFlush(w http.ResponseWriter, _ *http.Request, c appCall) {
	uw := unwrapOnly{w}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprintf(uw, "data: part 1 of call %d\n\n", c.n)
	if err := http.NewResponseController(uw).Flush(); err != nil {
		http.Error(w, "cannot flush: "+err.Error(), http.StatusInternalServerError)
		return
	}
	fmt.Fprintf(uw, "data: part 2 of call %d\n\n", c.n)
}

// serveLateHeader sets headers after WriteHeader: net/http never sends
// them.
func (a *app) serveLateHeader(w http.ResponseWriter, _ *http.Request, c appCall) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Early", "sent")
	w.WriteHeader(http.StatusCreated)
	w.Header().Set("X-Late", "set after the header")
	w.Header().Set("Content-Type", "text/plain; changed=after-the-header")
	w.Header()["X-Early"][0] = "changed in place after the header"
	fmt.Fprintf(w, `{"call":%d}`, c.n)
}

// serveStatusLate writes its body first, then the status in the query's
// code: net/http has sent 200 with the body by then, and ignores the
// later status (it logs "superfluous response.WriteHeader call").
func (a *app) serveStatusLate(w http.ResponseWriter, _ *http.Request, c appCall) {
	code, _ := strconv.Atoi(c.query.Get("code"))
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"call":%d}`, c.n)
	w.WriteHeader(code)
}

// serveStatusTwice writes the status in the query's first, then the one
// in then, then its body: net/http sends the first and ignores the other.
func (a *app) serveStatusTwice(w http.ResponseWriter, _ *http.Request, c appCall) {
	first, _ := strconv.Atoi(c.query.Get("first"))
	then, _ := strconv.Atoi(c.query.Get("then"))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(first)
	w.WriteHeader(then)
	fmt.Fprintf(w, `{"call":%d}`, c.n)
}

// serveLinks answers with header fields of several values each.
func (a *app) serveLinks(w http.ResponseWriter, _ *http.Request, c appCall) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Add("Link", fmt.Sprintf("</charges/ch_%d>; rel=self", c.n))
	h.Add("Link", "</charges>; rel=collection")
	h.Add("Cache-Control", "no-store")
	h.Add("Cache-Control", fmt.Sprintf("private, max-age=%d", c.n))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"call":%d}`, c.n)
}

// serveHeld answers with the key its context says it holds.
func (a *app) serveHeld(w http.ResponseWriter, r *http.Request, _ appCall) {
	held, ok := idem.HeldKey(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"held":%t,"scope":%q,"key":%q,"token":%q}`, ok, held.ID.Scope, held.ID.Key, held.Token)
}

// serveCtx waits for its context to end and answers why.
func (a *app) serveCtx(w http.ResponseWriter, r *http.Request, _ appCall) {
	a.entered <- struct{}{}
	select {
	case <-r.Context().Done():
	case <-a.release:
	case <-time.After(20 * time.Second):
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintf(w, "cause: %v", context.Cause(r.Context()))
}

// serveSlow waits to be released, then answers as any route.
func (a *app) serveSlow(w http.ResponseWriter, r *http.Request, c appCall) {
	a.entered <- struct{}{}
	select {
	case <-a.release:
	case <-time.After(20 * time.Second):
	}
	a.echoRequest(w, r, c)
}
