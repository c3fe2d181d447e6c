package idemtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/memstore"
)

// adverseCases are the bad days of the HTTP suite: clients that vanish
// mid-response, leases lost while a handler runs, timeouts, a full store.
var adverseCases = []httpCase{
	{name: "Delivery/ClientResetMidBody", config: func(c *idem.Config) { c.MaxResponseBody = 2 << 20 },
		run: func(t *testing.T, e *env) {
			// The client resets its connection while a large response is
			// written: what is stored must be what the handler wrote, whole.
			const size = 960 << 10
			path := fmt.Sprintf("/big?size=%d&pause=1", size)
			resetDuringResponse(t, e, "k-reset", path)
			wantResetMidResponse(t, recv(t, e.app.bigDone, "the handler's last part"), false)
			wantWholeReplay(t, e.settled(t, call{key: "k-reset", path: path, body: `{}`}), size)
			e.wantCalls(t, 1)
		}},
	{name: "Context/HeldKey", run: func(t *testing.T, e *env) {
		a := e.must(t, call{key: "k-held", tenant: "acct_a", path: "/held"}, 201)
		b := e.must(t, call{key: "k-held", tenant: "acct_b", path: "/held"}, 201)
		var ha, hb struct {
			Held              bool
			Scope, Key, Token string
		}
		mustJSON(t, a.body, &ha)
		mustJSON(t, b.body, &hb)
		if !ha.Held || ha.Key != "k-held" || ha.Scope != "acct_a" || ha.Token == "" {
			t.Fatalf("handler saw %+v, want its key, scope and a token", ha)
		}
		if hb.Token == ha.Token || hb.Scope != "acct_b" {
			t.Fatalf("two holders saw %+v and %+v: tokens must differ", ha, hb)
		}
	}},
	{name: "Context/LeaseLostCancels", config: cutOffRenewals,
		run: func(t *testing.T, e *env) {
			// The lease runs out while the handler runs, every renewal
			// failing: the handler's context is cancelled with ErrLeaseLost
			// before another request may take the key over.
			done := make(chan *result, 1)
			go func() { done <- e.send(call{key: "k-lost", path: "/ctx", body: `{}`}) }()
			waitEntered(t, e)
			e.clock.Advance(e.lease)
			r := recv(t, done, "the handler's answer")
			if r.err != nil || r.status != 503 || !strings.Contains(string(r.body), idem.ErrLeaseLost.Error()) {
				t.Fatalf("handler answered %d %q (%v), want its context cancelled with ErrLeaseLost", r.status, r.body, r.err)
			}
		}},
	{name: "Context/HandlerTimeout", config: func(c *idem.Config) { c.HandlerTimeout = 50 * time.Millisecond },
		run: func(t *testing.T, e *env) {
			send := func() *result {
				done := make(chan *result, 1)
				go func() { done <- e.send(call{key: "k-slow", path: "/ctx", body: `{}`}) }()
				waitEntered(t, e)
				e.clock.Advance(50 * time.Millisecond)
				return recv(t, done, "the handler's answer")
			}
			r := send()
			if r.err != nil || r.status != 503 || !strings.Contains(string(r.body), idem.ErrHandlerTimeout.Error()) {
				t.Fatalf("handler answered %d %q (%v), want its context cancelled with ErrHandlerTimeout", r.status, r.body, r.err)
			}
			// Not stored: the key was released once the handler returned.
			send()
			e.wantCalls(t, 2)
		}},
	{name: "Renewal/RecoversAfterOutage", config: func(c *idem.Config) {
		c.Store = failingRenewals{Store: c.Store, failing: new(atomic.Bool)}
	}, run: func(t *testing.T, e *env) {
		// The store refuses renewals for 12 s of a 30 s lease. A failed
		// renewal is tried again at the next pass, not a whole RenewEvery
		// later, so the handler keeps its key through the outage.
		failing := e.store.(failingRenewals).failing
		done := make(chan *result, 1)
		go func() { done <- e.send(call{key: "k-outage", path: "/ctx", body: `{}`}) }()
		waitEntered(t, e)
		e.clock.Advance(9 * time.Second)
		failing.Store(true)
		e.clock.Advance(12 * time.Second) // every renewal due meanwhile fails
		failing.Store(false)
		e.clock.Advance(9 * time.Second) // past the lease the outage began with
		// A handler told its lease is lost answers at once; one that holds
		// on does not answer at all (this wait only makes a failure quick).
		select {
		case r := <-done:
			t.Fatalf("the handler stopped during the outage: %d %q", r.status, r.body)
		case <-time.After(200 * time.Millisecond):
		}
		wantProblem(t, e.send(call{key: "k-outage", path: "/ctx", body: `{}`}), 409, exchange.ProblemInProgress)
		e.app.releaseSlow()
		if r := recv(t, done, "the handler's answer"); r.err != nil || !strings.HasSuffix(string(r.body), "cause: <nil>") {
			t.Fatalf("handler answered %d %q (%v), want its context never cancelled", r.status, r.body, r.err)
		}
		e.wantCalls(t, 1)
	}},
	{name: "Store/Full", config: func(c *idem.Config) { c.Store = fullStore{c.Store} }, run: func(t *testing.T, e *env) {
		r := e.send(call{key: "k1", body: `{}`})
		wantProblem(t, r, 429, exchange.ProblemStoreFull)
		if r.header.Get("Retry-After") == "" {
			t.Fatal("store-full without Retry-After")
		}
		e.wantCalls(t, 0)
	}},
}

// fullStore has no room for any new key.
type fullStore struct{ idem.Store }

func (fullStore) Acquire(context.Context, idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	return idem.Record{}, 0, idem.ErrStoreFull
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}

// TestTimeoutInside checks that a timeout middleware registered inside the
// adapter's middleware (http.TimeoutHandler with any message, or a
// framework's timeout that runs the handler on a goroutine of its own) can
// never let a retry run beside a handler it gave up on: the key stays
// locked, and the handler's context is cancelled. wrap mounts h behind the
// adapter's middleware for e with the timeout middleware between them, set
// to give up after a short time.
func TestTimeoutInside(t *testing.T, wrap func(e *idem.Engine, h http.Handler) http.Handler) {
	t.Helper()
	var calls atomic.Int64
	var handlerCtx atomic.Value // the first handler's request context
	release := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		handlerCtx.CompareAndSwap(nil, r.Context())
		select { // ignores its context, as a handler stuck in a call may
		case <-release:
		case <-time.After(20 * time.Second):
		}
		w.WriteHeader(http.StatusCreated)
	})
	e := idem.New(idem.Config{Store: memstore.New(memstore.WithPurgeInterval(0)), Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(wrap(e, slow))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	post := func() (int, string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/charges", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", `"timeout-1"`)
		req.Header.Set("Content-Type", "application/json")
		resp, err := suiteClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if status, body := post(); status < 400 {
		t.Fatalf("first request: %d %s, want the timeout middleware's answer", status, body)
	}
	// The handler is still running: a retry must not run it again.
	if status, body := post(); status != http.StatusConflict {
		t.Fatalf("retry while the timed-out handler still runs: %d %s, want 409", status, body)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want once", n)
	}
	ctx, _ := handlerCtx.Load().(context.Context)
	if ctx == nil {
		t.Fatal("the handler's context was not recorded")
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the handler's context is not cancelled after the timeout middleware gave up on it")
	}
}

// TestUnmatchedRoutes checks that requests matching no route pass through
// the adapter untouched, even with its middleware registered for the whole
// application: no key is required and nothing is recorded or replayed.
// baseURL serves an application with the middleware registered globally and
// a single route, POST /charges, answering 201.
func TestUnmatchedRoutes(t *testing.T, baseURL string) {
	t.Helper()
	send := func(method, path, key string) *http.Response {
		req, _ := http.NewRequest(method, baseURL+path, strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := suiteClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	for _, c := range []struct{ method, path string }{{"POST", "/nope"}, {"PATCH", "/charges"}} {
		if r := send(c.method, c.path, ""); r.StatusCode != 404 && r.StatusCode != 405 {
			t.Fatalf("%s %s without a key: %d, want the framework's 404 or 405", c.method, c.path, r.StatusCode)
		}
		for range 2 {
			r := send(c.method, c.path, `"unrouted"`)
			if r.StatusCode != 404 && r.StatusCode != 405 || r.Header.Get(exchange.ReplayedHeader) != "" {
				t.Fatalf("%s %s with a key: %d %v, want the framework's 404 or 405, never replayed", c.method, c.path, r.StatusCode, r.Header)
			}
		}
	}
	if r := send("POST", "/charges", ""); r.StatusCode != 400 {
		t.Fatalf("POST /charges without a key: %d, want 400: the route is guarded", r.StatusCode)
	}
	if r := send("POST", "/charges", `"unrouted"`); r.StatusCode != 201 || r.Header.Get(exchange.ReplayedHeader) != "" {
		t.Fatalf("POST /charges with the key used on unmatched routes: %d %v, want a first execution", r.StatusCode, r.Header)
	}
}
