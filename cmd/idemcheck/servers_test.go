package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
)

// The servers idemcheck is tested against: the application behind them,
// idemkit's reference middleware, and a small hand-written middleware whose
// faults can be planted one at a time.

// The hints the test servers understand, as idemcheck's flags give them.
const (
	delayHeader = "X-Delay" // the handler waits for the gate (-slow-header)
	failHeader  = "X-Fail"  // the handler answers 500 (-fail-header)
)

// gate holds slow requests without timing: a slow request waits until
// another request with its key has been answered (or, in arrival mode, has
// arrived), so the concurrency cases are deterministic. It wraps the whole
// server, outside any idempotency middleware.
type gate struct {
	arrival bool // release on the second arrival, for targets that hold a concurrent retry

	mu      sync.Mutex
	arrived map[string]int
	open    map[string]chan struct{}
}

func newGate(arrival bool) *gate {
	return &gate{arrival: arrival, arrived: map[string]int{}, open: map[string]chan struct{}{}}
}

func (g *gate) ch(k string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.open[k]
	if !ok {
		c = make(chan struct{})
		g.open[k] = c
	}
	return c
}

func (g *gate) release(k string) {
	c := g.ch(k)
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-c:
	default:
		close(c)
	}
}

func gateKey(r *http.Request) string { return strings.Join(r.Header.Values("Idempotency-Key"), "\n") }

func (g *gate) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := gateKey(r)
		if r.Header.Get(delayHeader) == "" || k == "" {
			next.ServeHTTP(w, r)
			return
		}
		if g.arrival {
			g.mu.Lock()
			g.arrived[k]++
			n := g.arrived[k]
			g.mu.Unlock()
			if n >= 2 {
				g.release(k)
			}
		}
		next.ServeHTTP(w, r)
		if !g.arrival {
			g.release(k)
		}
	})
}

// wait blocks a slow request until the gate opens. The bound only matters
// when a server under test misbehaves in a way the gate does not expect.
func (g *gate) wait(r *http.Request) {
	select {
	case <-g.ch(gateKey(r)):
	case <-time.After(5 * time.Second):
	case <-r.Context().Done():
	}
}

// app is the application: POST and PATCH create an object whose answer
// echoes the request, GET lists.
type app struct {
	gate    *gate
	pad     int // bytes of padding put before the answer's id, to make answers longer than idemcheck's read cap
	created atomic.Int64
}

func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch r.Method {
	case http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","count":%d}`, a.created.Load())
		return
	case http.MethodPost, http.MethodPatch:
	default:
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.Header.Get(failHeader) != "" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"error":"the provider failed"}`)
		return
	}
	if r.Header.Get(delayHeader) != "" && a.gate != nil {
		a.gate.wait(r)
	}
	n := a.created.Add(1)
	echo := body
	if !json.Valid(body) {
		echo, _ = json.Marshal(string(body))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/things/obj_%04d", n))
	w.WriteHeader(http.StatusCreated)
	if a.pad > 0 {
		// The padding comes first, so that answers that differ only in
		// their id agree on their first bytes.
		fmt.Fprintf(w, `{"pad":"%s",`, strings.Repeat("x", a.pad))
	} else {
		io.WriteString(w, "{")
	}
	fmt.Fprintf(w, `"id":"obj_%04d","request":%s}`, n, bytes.TrimSpace(echo))
}

// sameAnswer is an endpoint without idempotency keys whose answer never
// varies: every request runs, and nothing in the answer shows it.
func sameAnswer() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			io.WriteString(w, `{"object":"list"}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"status":"accepted"}`)
	})
}

func scope(r *http.Request) string { return r.Header.Get("Authorization") }

// referenceServer is the application behind idemkit's net/http middleware.
func referenceServer(t testing.TB) *httptest.Server {
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	engine := idem.New(idem.Config{Store: store})
	g := newGate(false)
	h := idemhttp.Middleware(engine, idemhttp.WithScope(scope))(&app{gate: g})
	srv := httptest.NewServer(g.wrap(h))
	t.Cleanup(srv.Close)
	return srv
}

// faults are the mistakes the hand-written middleware can be made to make,
// one at a time.
type faults struct {
	replay5xx     bool // stores 5xx answers and replays them
	stuckOn5xx    bool // a 5xx leaves the key locked: retries get 409
	queue         bool // a concurrent retry waits for the first request and gets its answer (allowed: 409 is a SHOULD)
	noFingerprint bool // another payload with a used key gets the first answer
	rawKey        bool // the header text is the key: "k" and k are two keys
	bare500       bool // anything but a valid sf-string makes it fail with 500
	firstLine     bool // the first of several key field lines is used
	sharedBuffer  bool // stored bodies share one buffer: a replay carries a later request's body
	noScope       bool // records are shared by all identities
	forget        bool // nothing is stored: every retry runs again
	plainErrors   bool // errors are text/plain, without Link
	guardGet      bool // GET requests are recorded too
	quoted500     bool // a quoted key makes it fail with 500 (it only knows bare keys)
	bareAbort     bool // a bare key crashes the handler: the connection drops without an answer
	markOnly      bool // a used key's request runs again, its answer marked Idempotent-Replayed: true
	reencode      bool // a replay's JSON body is encoded anew: the same value, other bytes (allowed: byte for byte is a SHOULD)
	cutKeys       bool // keys are cut to 255 characters, and records are kept per key and payload
}

// handMade is a small idempotency middleware written the way many are,
// correct unless a fault is planted.
type handMade struct {
	f    faults
	next http.Handler

	mu    sync.Mutex
	recs  map[string]*record
	locks map[string]*sync.Mutex
	buf   []byte
}

type record struct {
	fp     idem.Fingerprint
	done   bool
	status int
	header http.Header
	body   []byte
}

func newHandMade(f faults, next http.Handler) *handMade {
	return &handMade{f: f, next: next, recs: map[string]*record{}, locks: map[string]*sync.Mutex{}, buf: make([]byte, 0, 64<<10)}
}

func (m *handMade) problem(w http.ResponseWriter, status int, name, detail string) {
	if m.f.plainErrors {
		http.Error(w, detail, status)
		return
	}
	typ := "https://example.test/problems/" + name
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Link", "<"+typ+`>; rel="describedby"; type="text/html"`)
	if status == http.StatusConflict {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":%q,"title":%q,"status":%d,"detail":%q}`, typ, name, status, detail)
}

func (m *handMade) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	guarded := r.Method == http.MethodPost || r.Method == http.MethodPatch || m.f.guardGet && r.Method == http.MethodGet
	if !guarded {
		m.next.ServeHTTP(w, r)
		return
	}
	lines := r.Header.Values("Idempotency-Key")
	if len(lines) == 1 {
		quoted := strings.HasPrefix(strings.TrimSpace(lines[0]), `"`)
		switch {
		case m.f.quoted500 && quoted:
			http.Error(w, "internal error", http.StatusInternalServerError)
			return
		case m.f.bareAbort && !quoted:
			panic(http.ErrAbortHandler)
		}
	}
	if m.f.cutKeys && len(lines) == 1 && len(lines[0]) > 2+255 {
		// A key column of 255 characters: the quoted key loses its end.
		lines = []string{lines[0][:1+255] + `"`}
	}
	if m.f.firstLine && len(lines) > 1 {
		lines = lines[:1]
	}
	key, err := idem.ParseKey(lines, m.f.bare500)
	switch {
	case err != nil && len(lines) == 0:
		m.problem(w, 400, "key-missing", "the Idempotency-Key header is required")
		return
	case err != nil && m.f.bare500:
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	case err != nil:
		m.problem(w, 400, "key-invalid", err.Error())
		return
	}
	if m.f.rawKey {
		key = lines[0]
	}
	id := key
	if !m.f.noScope {
		id = scope(r) + "\x00" + key
	}
	body, _ := io.ReadAll(r.Body)
	var fp idem.Fingerprint
	if !m.f.noFingerprint {
		fp = idem.DefaultFingerprint(exchange.Request{Method: r.Method, Path: r.URL.RequestURI(), ContentType: r.Header.Get("Content-Type"), Body: body})
	}

	if m.f.cutKeys {
		id += "\x00" + fp.String()
	}

	if m.f.queue {
		m.mu.Lock()
		l, ok := m.locks[id]
		if !ok {
			l = new(sync.Mutex)
			m.locks[id] = l
		}
		m.mu.Unlock()
		l.Lock()
		defer l.Unlock()
	}

	m.mu.Lock()
	if rec := m.recs[id]; rec != nil && m.f.markOnly {
		m.mu.Unlock()
		w.Header().Set("Idempotent-Replayed", "true")
		r.Body = io.NopCloser(bytes.NewReader(body))
		m.next.ServeHTTP(w, r)
		return
	}
	if rec := m.recs[id]; rec != nil && !m.f.forget {
		seen := *rec // a copy taken under the lock: records change when requests finish
		seen.body = bytes.Clone(rec.body)
		m.mu.Unlock()
		switch {
		case seen.fp != fp:
			m.problem(w, 422, "key-reused", "the key was used with another request")
		case !seen.done:
			m.problem(w, 409, "in-progress", "a request with this key is in progress")
		default:
			for name, values := range seen.header {
				w.Header()[name] = values
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(seen.status)
			if m.f.reencode {
				var v any
				if json.Unmarshal(seen.body, &v) == nil {
					seen.body, _ = json.MarshalIndent(v, "", "  ")
				}
			}
			w.Write(seen.body)
		}
		return
	}
	rec := &record{fp: fp}
	m.recs[id] = rec
	m.mu.Unlock()

	rw := httptest.NewRecorder()
	r.Body = io.NopCloser(bytes.NewReader(body))
	m.next.ServeHTTP(rw, r)
	for name, values := range rw.Header() {
		w.Header()[name] = values
	}
	w.WriteHeader(rw.Code)
	w.Write(rw.Body.Bytes())

	m.mu.Lock()
	defer m.mu.Unlock()
	if rw.Code >= 500 && !m.f.replay5xx {
		if !m.f.stuckOn5xx {
			delete(m.recs, id)
		}
		return
	}
	rec.status = rw.Code
	rec.header = http.Header{}
	for _, h := range []string{"Content-Type", "Location"} {
		if v := rw.Header().Get(h); v != "" {
			rec.header.Set(h, v)
		}
	}
	if m.f.sharedBuffer {
		m.buf = append(m.buf[:0], rw.Body.Bytes()...)
		rec.body = m.buf
	} else {
		rec.body = bytes.Clone(rw.Body.Bytes())
	}
	rec.done = true
}

// handMadeServer is the application behind the hand-written middleware with
// the faults f planted.
func handMadeServer(t testing.TB, f faults) *httptest.Server {
	return paddedServer(t, f, 0)
}

// paddedServer is handMadeServer whose answers carry pad bytes of padding
// before their id.
func paddedServer(t testing.TB, f faults, pad int) *httptest.Server {
	g := newGate(f.queue || f.forget || f.markOnly)
	srv := httptest.NewServer(g.wrap(newHandMade(f, &app{gate: g, pad: pad})))
	t.Cleanup(srv.Close)
	return srv
}

// httptestServer serves h for the test's duration.
func httptestServer(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
