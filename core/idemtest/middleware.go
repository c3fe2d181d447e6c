package idemtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/memstore"
)

// ScopeHeader is the request header a Mount must use as the tenant scope.
const ScopeHeader = "X-Tenant"

// ProblemBase is the problem type base URI the suite configures.
const ProblemBase = "https://problems.idemkit.test/"

// Mount serves h behind the adapter's middleware for engine e and returns
// the server's base URL (such as "http://127.0.0.1:1234"). The adapter takes
// each request's tenant scope from the ScopeHeader header, in the way the
// adapter's users would (its scope option). Mount registers the server's
// shutdown with tb.Cleanup. h is a plain http.Handler: wrap it the way the
// framework's users would (gin.WrapH, echo.WrapHandler, ...); a panic in h
// must reach the framework's usual panic handling.
type Mount func(tb testing.TB, e *idem.Engine, h http.Handler) (baseURL string)

// TestMiddleware drives a server built by mount through every behaviour of
// the published policy. Every adapter runs it unchanged.
func TestMiddleware(t *testing.T, mount Mount) {
	t.Helper()
	for _, c := range append(httpCases, adverseCases...) {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, newEnv(t, mount, c.config))
		})
	}
}

// TestResponseWriter drives the response writer of an adapter built on
// net/http types (which Fiber is not) through what handlers do with one
// beside writing a body: flushing (directly, or through a writer that only
// offers Unwrap), hijacking, switching protocols, sending early hints,
// panicking. Every such adapter must give the same outcome for each.
func TestResponseWriter(t *testing.T, mount Mount) {
	t.Helper()
	cases := writerCases
	for _, c := range httpCases {
		switch c.name {
		case "NotStored/Streamed", "NotStored/Hijacked", "NotStored/Panic":
			cases = append(cases[:len(cases):len(cases)], c)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, newEnv(t, mount, c.config))
		})
	}
}

// writerCases: see TestResponseWriter. Flushing, hijacking and panicking
// are in the middleware suite too, which Fiber runs.
var writerCases = []httpCase{
	{name: "Replay/HeaderAsSent", config: func(c *idem.Config) { c.ReplayHeaders = []string{"X-Early", "X-Late"} },
		run: func(t *testing.T, e *env) {
			// A replay carries the header the client got, not the header as
			// the handler left it after it was sent.
			first := e.must(t, call{key: "k1", path: "/late-header", body: `{}`}, 201)
			r := e.must(t, call{key: "k1", path: "/late-header", body: `{}`}, 201)
			wantReplay(t, first, r)
			for _, h := range []string{"Content-Type", "X-Early", "X-Late"} {
				if got, want := r.header.Values(h), first.header.Values(h); !slices.Equal(got, want) {
					t.Fatalf("replayed %s = %q, the first response had %q", h, got, want)
				}
			}
			e.wantCalls(t, 1)
		}},
	{name: "NotStored/StreamedThroughUnwrap", run: func(t *testing.T, e *env) {
		first := e.must(t, call{key: "k1", path: "/unwrap-flush", body: `{}`}, 200)
		if !strings.Contains(string(first.body), "part 2 of call 1") {
			t.Fatalf("first response %q, want the streamed body", first.body)
		}
		r := e.settled(t, call{key: "k1", path: "/unwrap-flush", body: `{}`})
		if r.status != 200 || r.replayed() || !strings.Contains(string(r.body), "call 2") {
			t.Fatalf("retry got %d %q (replayed %v), want the handler run again", r.status, r.body, r.replayed())
		}
		e.wantCalls(t, 2)
	}},
	{name: "NotStored/SwitchingProtocols", run: func(t *testing.T, e *env) {
		for i := range 2 {
			if r := e.settled(t, call{key: "k1", path: "/switch", body: `{}`}); r.err != nil || r.status != 101 || r.replayed() {
				t.Fatalf("request %d: %d (replayed %v, %v), want the handler's own 101", i+1, r.status, r.replayed(), r.err)
			}
			// The connection is the handler's from the 101 on: the response
			// is streamed, whatever the handler writes after it.
			WantOutcome(t, e.outcomes, idemevent.NotStored, exchange.ReasonStreamed)
		}
		e.wantCalls(t, 2)
	}},
	{name: "Replay/AfterEarlyHints", run: func(t *testing.T, e *env) {
		// 103 is informational: the final status is what is stored.
		// (Echo v4 commits its response at the 103 and sends 200 after it:
		// whatever the framework sent is what is replayed.)
		first := e.settled(t, call{key: "k1", path: "/hints", body: `{}`})
		if first.err != nil || first.status < 200 || first.status >= 300 {
			t.Fatalf("first response %d (%v), want the handler's success", first.status, first.err)
		}
		wantReplay(t, first, e.settled(t, call{key: "k1", path: "/hints", body: `{}`}))
		e.wantCalls(t, 1)
	}},
}

type httpCase struct {
	name   string
	config func(*idem.Config) // nil: the suite's defaults
	run    func(*testing.T, *env)
}

// env is one mounted server with its engine, clock and application.
type env struct {
	url    string
	app    *app
	clock  *Clock
	store  idem.Store // the Engine's, as the case configured it
	lease  time.Duration
	client *http.Client
	// outcomes receives the end of every lock (EventStored and
	// EventNotStored), as far as its buffer holds them: a case that
	// checks why a response was not stored reads them.
	outcomes <-chan idemevent.Event
}

// The suite's limits, small so the size cases stay fast.
const (
	maxRequestBody  = 4096
	maxResponseBody = 4096
)

func newEnv(t *testing.T, mount Mount, configure func(*idem.Config)) *env {
	clock := NewClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.WithPurgeInterval(0))
	cfg := idem.Config{
		Store:           store,
		Clock:           clock,
		MaxRequestBody:  maxRequestBody,
		MaxResponseBody: maxResponseBody,
		ProblemBase:     ProblemBase,
		Logger:          slog.New(slog.DiscardHandler),
	}
	if configure != nil {
		configure(&cfg)
	}
	outcomes := make(chan idemevent.Event, 64)
	caseHook := cfg.OnEvent
	cfg.OnEvent = func(ctx context.Context, ev idemevent.Event) {
		if caseHook != nil {
			caseHook(ctx, ev)
		}
		if ev.Kind == idemevent.Stored || ev.Kind == idemevent.NotStored {
			select { // cases that never read them lose the later ones
			case outcomes <- ev:
			default:
			}
		}
	}
	a := newApp()
	t.Cleanup(a.releaseSlow)
	engine := idem.New(cfg)
	url := mount(t, engine, a)
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	// Cleanups run last in, first out: the client lets go of its idle
	// connections before the server shuts down, so no server waits for them.
	t.Cleanup(transport.CloseIdleConnections)
	return &env{
		url:      url,
		app:      a,
		clock:    clock,
		store:    cfg.Store,
		lease:    engine.Config().Lease,
		outcomes: outcomes,
		client: &http.Client{
			Transport: transport,
			// Every request a case sends ends long before this: a broken
			// build fails the case with a message, not the test binary.
			Timeout:       10 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// call is one request of a case.
type call struct {
	method string // default POST
	path   string // default /charges
	key    string // sent as one field line unless noKey or keys is set
	keys   []string
	noKey  bool
	body   string
	ctype  string // default application/json
	tenant string
	// chunked sends the body without a Content-Length.
	chunked bool
	// header holds further request header fields.
	header http.Header
}

type result struct {
	status int
	header http.Header
	body   []byte
	err    error
}

func (r *result) replayed() bool { return r.header.Get(exchange.ReplayedHeader) == "true" }

func (e *env) send(c call) *result {
	if c.method == "" {
		c.method = http.MethodPost
	}
	if c.path == "" {
		c.path = "/charges"
	}
	var body io.Reader = strings.NewReader(c.body)
	if c.chunked {
		body = io.MultiReader(strings.NewReader(c.body)) // hides the length
	}
	req, err := http.NewRequest(c.method, e.url+c.path, body)
	if err != nil {
		return &result{err: err}
	}
	if c.ctype == "" {
		c.ctype = "application/json"
	}
	req.Header.Set("Content-Type", c.ctype)
	switch {
	case c.keys != nil:
		req.Header[http.CanonicalHeaderKey(idem.DefaultHeaderName)] = c.keys
	case !c.noKey:
		req.Header.Set(idem.DefaultHeaderName, c.key)
	}
	if c.tenant != "" {
		req.Header.Set(ScopeHeader, c.tenant)
	}
	for name, values := range c.header {
		req.Header[name] = values
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return &result{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return &result{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// must sends c and fails the test on a transport error or another status.
func (e *env) must(t *testing.T, c call, status int) *result {
	t.Helper()
	r := e.send(c)
	if r.err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, r.err)
	}
	if r.status != status {
		t.Fatalf("%s %s with key %q: status %d, want %d; body %s", c.method, c.path, c.key, r.status, status, r.body)
	}
	return r
}

func (e *env) wantCalls(t *testing.T, want int64) {
	t.Helper()
	if got := e.app.calls.Load(); got != want {
		t.Fatalf("handler ran %d times, want %d", got, want)
	}
}

// wantReplay checks that r replays first exactly.
func wantReplay(t *testing.T, first, r *result) {
	t.Helper()
	if !r.replayed() {
		t.Fatalf("second response lacks %s: true (headers %v)", exchange.ReplayedHeader, r.header)
	}
	if first.replayed() {
		t.Fatalf("first response carries %s", exchange.ReplayedHeader)
	}
	if r.status != first.status || !bytes.Equal(r.body, first.body) {
		t.Fatalf("replay = %d %q, want %d %q", r.status, r.body, first.status, first.body)
	}
	for _, h := range []string{"Content-Type", "Location"} {
		if r.header.Get(h) != first.header.Get(h) {
			t.Fatalf("replayed %s = %q, want %q", h, r.header.Get(h), first.header.Get(h))
		}
	}
	if r.header.Get("Set-Cookie") != "" {
		t.Fatalf("replay carries Set-Cookie %q", r.header.Get("Set-Cookie"))
	}
}

// wantRecordedAsSent sends c twice, for a handler that wrote one of the
// statuses sent (what decides which is the framework's), and checks that
// the retry replays the first response, sent with a storable status, or
// runs the handler again, after a 5xx.
func wantRecordedAsSent(t *testing.T, e *env, c call, what string, sent ...int) {
	t.Helper()
	before := e.app.calls.Load()
	first := e.settled(t, c)
	if first.err != nil || !slices.Contains(sent, first.status) {
		t.Fatalf("%s: the first response is %d (%v), want one of %v", what, first.status, first.err, sent)
	}
	r := e.settled(t, c)
	runs := e.app.calls.Load() - before
	if first.status >= 500 {
		if r.replayed() || runs != 2 {
			t.Fatalf("%s: the client got %d, yet the retry got %d (replayed %v) after %d runs; want the handler run again",
				what, first.status, r.status, r.replayed(), runs)
		}
		return
	}
	wantReplay(t, first, r)
	if runs != 1 {
		t.Fatalf("%s: the handler ran %d times, want once", what, runs)
	}
}

// wantProblem checks an RFC 9457 problem response of the given type.
func wantProblem(t *testing.T, r *result, status int, name string) {
	t.Helper()
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.status != status {
		t.Fatalf("status %d, want %d (%s); body %s", r.status, status, name, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != exchange.ProblemContentType {
		t.Fatalf("problem Content-Type = %q", ct)
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	dec := json.NewDecoder(bytes.NewReader(r.body))
	if err := dec.Decode(&p); err != nil || dec.More() {
		t.Fatalf("problem body is not one JSON object (%v): %s", err, r.body)
	}
	if p.Type != ProblemBase+name || p.Title == "" || p.Status != status || p.Detail == "" {
		t.Fatalf("problem = %+v, want type %s, a title, status %d and a detail", p, ProblemBase+name, status)
	}
	if link := r.header.Get("Link"); link != "<"+p.Type+`>; rel="describedby"; type="text/html"` {
		t.Fatalf("problem Link header = %q", link)
	}
	if r.replayed() {
		t.Fatal("a problem from idemkit itself is never a replay")
	}
}

// formPart is one field of a multipart form: a file when file is set.
type formPart struct{ name, file, value string }

// multipartForm encodes parts as multipart/form-data with boundary and
// returns its Content-Type and body.
func multipartForm(t *testing.T, boundary string, parts []formPart) (ctype, body string) {
	t.Helper()
	var b strings.Builder
	w := multipart.NewWriter(&b)
	if err := w.SetBoundary(boundary); err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		var err error
		if p.file != "" {
			var fw io.Writer
			if fw, err = w.CreateFormFile(p.name, p.file); err == nil {
				_, err = io.WriteString(fw, p.value)
			}
		} else {
			err = w.WriteField(p.name, p.value)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return w.FormDataContentType(), b.String()
}

// validKeys and invalidKeys feed the key syntax cases.
var validKeys = []struct{ name, header, key string }{
	{"Quoted", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
	{"Bare", `0f5c2a9e-7c1b-4f7e-9d2a-3b8e6c1d4a70`, "0f5c2a9e-7c1b-4f7e-9d2a-3b8e6c1d4a70"},
	{"BareBase64", `dGhpcyBpcyBhIGtleQ==`, "dGhpcyBpcyBhIGtleQ=="},
	{"Escapes", `"a\"b\\c"`, `a"b\c`},
	{"Parameters", `"abc";v=1;x`, "abc"},
	{"SpacesInside", `" a b "`, " a b "},
	{"CommaInside", `"a,b"`, "a,b"},
	{"Max255", `"` + strings.Repeat("k", 255) + `"`, strings.Repeat("k", 255)},
}

var invalidKeys = []struct{ name, header string }{
	{"Empty", `""`},
	{"Blank", ` `},
	{"TooLong", `"` + strings.Repeat("k", 256) + `"`},
	{"NonASCII", "\"cl\xc3\xa9\""},
	{"Tab", "\"a\tb\""},
	{"BadEscape", `"a\nb"`},
	{"Unterminated", `"abc`},
	{"TrailingJunk", `"abc"def`},
	{"List", `"a", "b"`},
	{"BadParameter", `"abc";V=1`},
	{"Token", `abc;x=1`},
	{"Integer", `42;q`},
	{"Boolean", `?1`},
}

var httpCases = []httpCase{
	{name: "FirstRequest/RunsHandler", run: func(t *testing.T, e *env) {
		r := e.must(t, call{key: "k1", body: `{"amount":100}`}, 201)
		e.wantCalls(t, 1)
		if r.replayed() || r.header.Get("Location") != "/charges/ch_1" || !bytes.Contains(r.body, []byte(`"body_len":14`)) {
			t.Fatalf("first response %v %s: want the handler's own, with the whole body read", r.header, r.body)
		}
	}},
	{name: "Replay/SameResponse", run: func(t *testing.T, e *env) {
		first := e.must(t, call{key: "k1", body: `{"amount":100}`}, 201)
		for range 3 {
			wantReplay(t, first, e.must(t, call{key: "k1", body: `{"amount":100}`}, 201))
		}
		e.wantCalls(t, 1)
		if r := e.must(t, call{key: "k1", body: `{"amount":100}`}, 201); r.header.Get("X-Extra") != "" {
			t.Fatalf("a header not listed in ReplayHeaders was replayed: %v", r.header)
		}
	}},
	{name: "Replay/AllowedHeaders", config: func(c *idem.Config) { c.ReplayHeaders = []string{"x-extra", "Set-Cookie"} },
		run: func(t *testing.T, e *env) {
			first := e.must(t, call{key: "k1"}, 201)
			r := e.must(t, call{key: "k1"}, 201)
			wantReplay(t, first, r) // Set-Cookie stays out even when listed
			if r.header.Get("X-Extra") != "extra-1" {
				t.Fatalf("X-Extra = %q, want the first response's", r.header.Get("X-Extra"))
			}
		}},
	{name: "Replay/MultiValuedHeaders", config: func(c *idem.Config) { c.ReplayHeaders = []string{"Link", "Cache-Control"} },
		run: func(t *testing.T, e *env) {
			first := e.must(t, call{key: "k1", path: "/links"}, 201)
			r := e.must(t, call{key: "k1", path: "/links"}, 201)
			wantReplay(t, first, r)
			for _, h := range []string{"Link", "Cache-Control"} {
				if got, want := r.header.Values(h), first.header.Values(h); !slices.Equal(got, want) || len(want) != 2 {
					t.Fatalf("replayed %s = %q, want the first response's two values %q", h, got, want)
				}
			}
			e.wantCalls(t, 1)
		}},
	{name: "Replay/ReorderedJSON", run: func(t *testing.T, e *env) {
		first := e.must(t, call{key: "k1", body: `{"amount":100,"currency":"usd","meta":{"a":1,"b":[1,2]}}`}, 201)
		r := e.must(t, call{key: "k1", ctype: "application/json; charset=utf-8",
			body: "{ \"meta\" : {\"b\":[1, 2],\"a\":1},\n \"currency\":\"usd\", \"amount\":100 }"}, 201)
		wantReplay(t, first, r)
		e.wantCalls(t, 1)
	}},
	{name: "Replay/FormWithAnotherBoundary", run: func(t *testing.T, e *env) {
		// Clients (curl -F, browsers) pick a new random boundary each time
		// they send a form: a retry of the same form is the same request.
		parts := []formPart{{name: "amount", value: "100"}, {name: "receipt", file: "r.txt", value: "paid in full"}}
		send := func(boundary string, parts []formPart) *result {
			ctype, body := multipartForm(t, boundary, parts)
			return e.send(call{key: "k1", path: "/charges", ctype: ctype, body: body})
		}
		first := send("first-boundary-1111", parts)
		if first.err != nil || first.status != 201 {
			t.Fatalf("first form: %d %v %s", first.status, first.err, first.body)
		}
		r := send("second-boundary-2222", parts)
		if r.err != nil || r.status != 201 {
			t.Fatalf("same form, another boundary: %d %v %s", r.status, r.err, r.body)
		}
		wantReplay(t, first, r)
		changed := []formPart{{name: "amount", value: "100"}, {name: "receipt", file: "r.txt", value: "paid in part"}}
		wantProblem(t, send("third-boundary-3333", changed), 422, exchange.ProblemKeyReused)
		renamed := []formPart{{name: "amount", value: "100"}, {name: "receipt", file: "s.txt", value: "paid in full"}}
		wantProblem(t, send("fourth-boundary-4444", renamed), 422, exchange.ProblemKeyReused)
		e.wantCalls(t, 1)
	}},
	{name: "Mismatch/ContentEncoding", run: func(t *testing.T, e *env) {
		// The same bytes with and without a Content-Encoding are read
		// differently by a server that decodes the body.
		first := e.must(t, call{key: "k1", body: `{"amount":100}`, ctype: "text/plain"}, 201)
		gzipped := call{key: "k1", body: `{"amount":100}`, ctype: "text/plain",
			header: http.Header{"Content-Encoding": {"gzip"}}}
		wantProblem(t, e.send(gzipped), 422, exchange.ProblemKeyReused)
		wantReplay(t, first, e.must(t, call{key: "k1", body: `{"amount":100}`, ctype: "text/plain"}, 201))
		e.wantCalls(t, 1)
	}},
	{name: "Mismatch/CaseVariantNames", run: func(t *testing.T, e *env) {
		// encoding/json reads both "amount" and "Amount" into one field and
		// keeps the last: these two bodies charge 99999 and 100.
		first := e.must(t, call{key: "k1", body: `{"amount":100,"Amount":99999}`}, 201)
		wantProblem(t, e.send(call{key: "k1", body: `{"Amount":99999,"amount":100}`}), 422, exchange.ProblemKeyReused)
		wantReplay(t, first, e.must(t, call{key: "k1", body: `{ "amount": 100, "Amount": 99999 }`}, 201))
		e.wantCalls(t, 1)
	}},
	{name: "Replay/AfterOtherTraffic", run: func(t *testing.T, e *env) {
		first := e.must(t, call{key: "keep", body: `{"amount":1}`}, 201)
		for i := range 50 {
			e.must(t, call{key: fmt.Sprintf("other-%d", i), body: fmt.Sprintf(`{"amount":%d,"pad":%q}`, i, strings.Repeat("x", i*20))}, 201)
		}
		wantReplay(t, first, e.must(t, call{key: "keep", body: `{"amount":1}`}, 201))
	}},
	{name: "Replay/StoredStatuses", run: func(t *testing.T, e *env) {
		for _, code := range []int{200, 202, 204, 302, 400, 403, 404, 410, 422} {
			c := call{key: fmt.Sprintf("k-%d", code), path: fmt.Sprintf("/status?code=%d", code)}
			first := e.must(t, c, code)
			wantReplay(t, first, e.must(t, c, code))
		}
		e.wantCalls(t, 9)
	}},
	{name: "Replay/StatusAfterBody", run: func(t *testing.T, e *env) {
		// A handler that writes its body and then a status: the client got
		// what the framework sent (net/http sends 200 with the body and
		// ignores the later status; Fiber sends its response, with the
		// later status, once the handler returns), and that is what is
		// stored and replayed, or, if it is not storable, nothing is.
		for _, code := range []int{201, 503} {
			wantRecordedAsSent(t, e, call{key: fmt.Sprintf("k-%d", code), path: fmt.Sprintf("/status-late?code=%d", code)},
				fmt.Sprintf("status %d after the body", code), 200, code)
		}
	}},
	{name: "Replay/StatusTwice", run: func(t *testing.T, e *env) {
		// A handler that writes two statuses: the client got one of them
		// (net/http sends the first), and that one is stored and replayed,
		// or, if it is not storable, nothing is.
		for _, c := range []struct{ first, then int }{{201, 202}, {201, 500}, {503, 201}} {
			wantRecordedAsSent(t, e, call{key: fmt.Sprintf("k-%d-%d", c.first, c.then), path: fmt.Sprintf("/status-twice?first=%d&then=%d", c.first, c.then)},
				fmt.Sprintf("statuses %d then %d", c.first, c.then), c.first, c.then)
		}
	}},
	{name: "Replay/NoContentType", run: func(t *testing.T, e *env) {
		// A replay carries the headers the client received, no more: a
		// response sent without a Content-Type is replayed without one,
		// whatever default the framework has for a body it must type.
		for _, code := range []int{200, 201, 204} {
			c := call{key: fmt.Sprintf("k-%d", code), path: fmt.Sprintf("/status?code=%d&bare=1", code)}
			first := e.must(t, c, code)
			if ct := first.header.Values("Content-Type"); len(ct) != 0 {
				t.Fatalf("%d without a body: the first response carries Content-Type %q", code, ct)
			}
			r := e.must(t, c, code)
			wantReplay(t, first, r)
			if ct := r.header.Values("Content-Type"); len(ct) != 0 {
				t.Fatalf("%d without a body: the replay carries Content-Type %q, which the first response did not", code, ct)
			}
		}
		e.wantCalls(t, 3)
	}},
	{name: "NotStored/Statuses", run: func(t *testing.T, e *env) {
		codes := []int{408, 409, 425, 429, 500, 502, 503}
		for _, code := range codes {
			c := call{key: fmt.Sprintf("k-%d", code), path: fmt.Sprintf("/status?code=%d", code)}
			e.must(t, c, code)
			if r := e.must(t, c, code); r.replayed() {
				t.Fatalf("status %d was stored and replayed", code)
			}
		}
		e.wantCalls(t, int64(2*len(codes)))
	}},
	{name: "NotStored/Panic", run: func(t *testing.T, e *env) {
		e.app.panicking.Store(true)
		if r := e.send(call{key: "k1", path: "/panic"}); r.err == nil && r.status != 500 {
			t.Fatalf("panicking handler answered %d, want 500 or a dropped connection", r.status)
		}
		e.app.panicking.Store(false)
		r := e.must(t, call{key: "k1", path: "/panic"}, 201)
		if r.replayed() {
			t.Fatal("a panicked request was stored")
		}
		e.wantCalls(t, 2)
		wantReplay(t, r, e.must(t, call{key: "k1", path: "/panic"}, 201))
	}},
	{name: "NotStored/Streamed", run: func(t *testing.T, e *env) {
		first := e.must(t, call{key: "k1", path: "/stream"}, 200)
		if !bytes.Contains(first.body, []byte("part 2 of call 1")) {
			t.Fatalf("streamed body %q incomplete", first.body)
		}
		if r := e.must(t, call{key: "k1", path: "/stream"}, 200); r.replayed() || !bytes.Contains(r.body, []byte("call 2")) {
			t.Fatalf("a streamed response was stored: %q", r.body)
		}
		e.wantCalls(t, 2)
	}},
	{name: "NotStored/Hijacked", run: func(t *testing.T, e *env) {
		// The handler takes the connection over and answers on it: what
		// went out is unknown to idemkit, so nothing is stored and a retry
		// runs the handler again.
		first := e.must(t, call{key: "k1", path: "/hijack", body: `{}`}, 200)
		if string(first.body) != "hijacked by call 1" {
			t.Fatalf("first response %q, want the hijacking handler's", first.body)
		}
		r := e.settled(t, call{key: "k1", path: "/hijack", body: `{}`})
		if r.err != nil || r.status != 200 || r.replayed() || string(r.body) != "hijacked by call 2" {
			t.Fatalf("retry got %d %q (replayed %v, %v), want the handler run again", r.status, r.body, r.replayed(), r.err)
		}
		e.wantCalls(t, 2)
	}},
	{name: "NotStored/ResponseTooLarge", run: func(t *testing.T, e *env) {
		c := call{key: "k1", path: fmt.Sprintf("/big?size=%d", maxResponseBody+1)}
		if r := e.must(t, c, 200); len(r.body) != maxResponseBody+1 {
			t.Fatalf("client got %d bytes, want all %d", len(r.body), maxResponseBody+1)
		}
		if r := e.must(t, c, 200); r.replayed() {
			t.Fatal("a response over the store limit was stored")
		}
		e.wantCalls(t, 2)
		ok := call{key: "k2", path: fmt.Sprintf("/big?size=%d", maxResponseBody)}
		wantReplay(t, e.must(t, ok, 200), e.must(t, ok, 200))
	}},
	{name: "Mismatch/Body", run: func(t *testing.T, e *env) {
		first := e.must(t, call{key: "k1", body: `{"amount":100}`}, 201)
		wantProblem(t, e.send(call{key: "k1", body: `{"amount":200}`}), 422, exchange.ProblemKeyReused)
		wantProblem(t, e.send(call{key: "k1", body: `{"amount":100.0}`}), 422, exchange.ProblemKeyReused)
		wantProblem(t, e.send(call{key: "k1", body: `{"amount":100}`, ctype: "text/plain"}), 422, exchange.ProblemKeyReused)
		// The original record is untouched.
		wantReplay(t, first, e.must(t, call{key: "k1", body: `{"amount":100}`}, 201))
		e.wantCalls(t, 1)
	}},
	{name: "Mismatch/PathAndMethod", run: func(t *testing.T, e *env) {
		first := e.must(t, call{key: "k1", body: `{}`}, 201)
		wantProblem(t, e.send(call{key: "k1", body: `{}`, path: "/charges/other"}), 422, exchange.ProblemKeyReused)
		wantProblem(t, e.send(call{key: "k1", body: `{}`, path: "/charges?x=1"}), 422, exchange.ProblemKeyReused)
		wantProblem(t, e.send(call{key: "k1", body: `{}`, method: http.MethodPatch}), 422, exchange.ProblemKeyReused)
		wantReplay(t, first, e.must(t, call{key: "k1", body: `{}`}, 201))
		e.wantCalls(t, 1)
	}},
	{name: "Conflict/InFlight", run: func(t *testing.T, e *env) {
		done := make(chan *result, 1)
		go func() { done <- e.send(call{key: "k1", path: "/slow", body: `{"a":1}`}) }()
		waitEntered(t, e)
		r := e.send(call{key: "k1", path: "/slow", body: `{"a":1}`})
		wantProblem(t, r, 409, exchange.ProblemInProgress)
		if r.header.Get("Retry-After") != "1" {
			t.Fatalf("409 Retry-After = %q, want 1", r.header.Get("Retry-After"))
		}
		// Another payload is a mismatch, even while the original runs.
		wantProblem(t, e.send(call{key: "k1", path: "/slow", body: `{"a":2}`}), 422, exchange.ProblemKeyReused)
		e.app.releaseSlow()
		first := recv(t, done, "the original request's response")
		if first.err != nil || first.status != 201 {
			t.Fatalf("original request: %d %v", first.status, first.err)
		}
		wantReplay(t, first, e.must(t, call{key: "k1", path: "/slow", body: `{"a":1}`}, 201))
		e.wantCalls(t, 1)
	}},
	{name: "Concurrent/OneExecution", run: func(t *testing.T, e *env) {
		const n = 50
		results := make(chan *result, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range n {
			wg.Go(func() {
				<-start
				results <- e.send(call{key: "k-storm", path: "/slow", body: `{"amount":5}`})
			})
		}
		close(start)
		waitEntered(t, e)
		// Let the others collect their 409s before the one execution ends.
		deadline := time.Now().Add(10 * time.Second)
		for len(results) < n-1 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		e.app.releaseSlow()
		wg.Wait()
		close(results)
		fresh, conflicts, replays := 0, 0, 0
		for r := range results {
			switch {
			case r.err != nil:
				t.Fatal(r.err)
			case r.status == 201 && !r.replayed():
				fresh++
			case r.status == 201:
				replays++
			case r.status == 409:
				conflicts++
			default:
				t.Fatalf("unexpected response %d %s", r.status, r.body)
			}
		}
		if fresh != 1 || conflicts+replays != n-1 {
			t.Fatalf("%d parallel requests: %d executed, %d conflicts, %d replays", n, fresh, conflicts, replays)
		}
		e.wantCalls(t, 1)
	}},
	{name: "Key/Missing", run: func(t *testing.T, e *env) {
		wantProblem(t, e.send(call{noKey: true, body: `{}`}), 400, exchange.ProblemKeyMissing)
		wantProblem(t, e.send(call{noKey: true, method: http.MethodPatch}), 400, exchange.ProblemKeyMissing)
		e.wantCalls(t, 0)
	}},
	{name: "Key/Optional", config: func(c *idem.Config) { c.KeyOptional = true }, run: func(t *testing.T, e *env) {
		for range 2 {
			if r := e.must(t, call{noKey: true, body: `{}`}, 201); r.replayed() {
				t.Fatal("a request without a key was replayed")
			}
		}
		e.wantCalls(t, 2)
		wantProblem(t, e.send(call{key: `"unterminated`}), 400, exchange.ProblemKeyInvalid)
		wantReplay(t, e.must(t, call{key: "k1"}, 201), e.must(t, call{key: "k1"}, 201))
	}},
	{name: "Key/Valid", run: func(t *testing.T, e *env) {
		for _, k := range validKeys {
			first := e.must(t, call{key: k.header, body: `{}`}, 201)
			if r := e.must(t, call{key: k.header, body: `{}`}, 201); !r.replayed() || !bytes.Equal(r.body, first.body) {
				t.Fatalf("key %s (%q) was not replayed", k.name, k.header)
			}
		}
		e.wantCalls(t, int64(len(validKeys)))
		// A quoted key and its bare spelling are the same key.
		if r := e.must(t, call{key: `"0f5c2a9e-7c1b-4f7e-9d2a-3b8e6c1d4a70";v=2`, body: `{}`}, 201); !r.replayed() {
			t.Fatal("a quoted key with parameters is not the same key as its bare form")
		}
	}},
	{name: "Key/Invalid", run: func(t *testing.T, e *env) {
		for _, k := range invalidKeys {
			r := e.send(call{key: k.header, body: `{}`})
			if r.err != nil {
				t.Fatalf("key %s: %v", k.name, r.err)
			}
			if r.status != 400 {
				t.Fatalf("key %s (%q): status %d, want 400", k.name, k.header, r.status)
			}
			wantProblem(t, r, 400, exchange.ProblemKeyInvalid)
		}
		wantProblem(t, e.send(call{keys: []string{`"a"`, `"a"`}}), 400, exchange.ProblemKeyInvalid)
		wantProblem(t, e.send(call{keys: []string{`"a"`, `"b"`}}), 400, exchange.ProblemKeyInvalid)
		e.wantCalls(t, 0)
	}},
	{name: "Key/StrictMode", config: func(c *idem.Config) { c.StrictKeys = true }, run: func(t *testing.T, e *env) {
		wantProblem(t, e.send(call{key: "8e03978e-40d5-43e8-bc93-6894a57f9324"}), 400, exchange.ProblemKeyInvalid)
		wantProblem(t, e.send(call{key: ":aGVsbG8=:"}), 400, exchange.ProblemKeyInvalid)
		wantReplay(t, e.must(t, call{key: `"abc"`}, 201), e.must(t, call{key: `"abc"`}, 201))
	}},
	{name: "Scope/TenantsApart", run: func(t *testing.T, e *env) {
		a := e.must(t, call{key: "shared", tenant: "acct_a", body: `{"amount":1}`}, 201)
		b := e.must(t, call{key: "shared", tenant: "acct_b", body: `{"amount":2}`}, 201)
		g := e.must(t, call{key: "shared", body: `{"amount":3}`}, 201)
		if a.replayed() || b.replayed() || g.replayed() {
			t.Fatal("a tenant saw another tenant's record")
		}
		e.wantCalls(t, 3)
		wantReplay(t, a, e.must(t, call{key: "shared", tenant: "acct_a", body: `{"amount":1}`}, 201))
		wantReplay(t, b, e.must(t, call{key: "shared", tenant: "acct_b", body: `{"amount":2}`}, 201))
		e.wantCalls(t, 3)
	}},
	{name: "Expiry/ShortTTL", config: func(c *idem.Config) { c.TTL = time.Minute }, run: func(t *testing.T, e *env) {
		first := e.must(t, call{key: "k1", body: `{"amount":1}`}, 201)
		e.clock.Advance(59 * time.Second)
		wantReplay(t, first, e.must(t, call{key: "k1", body: `{"amount":1}`}, 201))
		e.clock.Advance(time.Second)
		if r := e.must(t, call{key: "k1", body: `{"amount":1}`}, 201); r.replayed() {
			t.Fatal("an expired key was replayed")
		}
		e.clock.Advance(2 * time.Minute)
		// Once expired, the key may even carry another payload.
		e.must(t, call{key: "k1", body: `{"amount":2}`}, 201)
		e.wantCalls(t, 3)
	}},
	{name: "Lease/TakeoverAfterCrash", config: cutOffRenewals, run: func(t *testing.T, e *env) {
		// The first holder hangs, cut off from the store (as a crashed or
		// partitioned instance would be), past its lease.
		done := make(chan *result, 1)
		go func() { done <- e.send(call{key: "k1", path: "/slow", body: `{}`}) }()
		waitEntered(t, e)
		e.clock.Advance(e.lease + time.Second)
		second := make(chan *result, 1)
		go func() { second <- e.send(call{key: "k1", path: "/slow", body: `{}`}) }()
		waitEntered(t, e)
		e.app.releaseSlow()
		old, taken := recv(t, done, "the first holder's response"), recv(t, second, "the new holder's response")
		if taken.err != nil || taken.status != 201 {
			t.Fatalf("the new holder's response: %d (%v)", taken.status, taken.err)
		}
		// Whatever order they finished in, the stored response is the new
		// holder's, and the old holder's is withheld: it is not the key's
		// outcome, so its client must not take it for one.
		if old.err == nil {
			wantProblem(t, old, 503, exchange.ProblemStoreUnavailable)
		}
		wantReplay(t, taken, e.must(t, call{key: "k1", path: "/slow", body: `{}`}, 201))
		e.wantCalls(t, 2)
	}},
	{name: "Body/TooLarge", run: func(t *testing.T, e *env) {
		big := `{"pad":"` + strings.Repeat("x", maxRequestBody) + `"}`
		wantProblem(t, e.send(call{key: "k1", body: big}), 413, exchange.ProblemPayloadTooLarge)
		wantProblem(t, e.send(call{key: "k2", body: big, chunked: true}), 413, exchange.ProblemPayloadTooLarge)
		e.wantCalls(t, 0)
		// Not recorded: the key is still free for a request within the limit.
		e.must(t, call{key: "k1", body: `{}`}, 201)
		exact := strings.Repeat("y", maxRequestBody)
		r := e.must(t, call{key: "k3", body: exact, ctype: "text/plain", chunked: true}, 201)
		if !bytes.Contains(r.body, []byte(fmt.Sprintf(`"body_len":%d`, maxRequestBody))) {
			t.Fatalf("handler did not get the whole body: %s", r.body)
		}
	}},
	{name: "PassThrough/OtherMethods", run: func(t *testing.T, e *env) {
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodDelete, http.MethodOptions, http.MethodHead} {
			for range 2 {
				if r := e.must(t, call{method: m, key: "k1"}, 200); r.replayed() {
					t.Fatalf("%s was replayed", m)
				}
			}
			// A malformed or missing key does not matter either.
			e.must(t, call{method: m, key: `"bad`}, 200)
			e.must(t, call{method: m, noKey: true}, 200)
		}
		e.wantCalls(t, 20)
		// Nothing was recorded under k1 by those requests.
		if r := e.must(t, call{key: "k1"}, 201); r.replayed() {
			t.Fatal("a GET recorded its key")
		}
	}},
	{name: "Store/Unavailable", config: func(c *idem.Config) { c.Store = failingStore{} }, run: func(t *testing.T, e *env) {
		wantProblem(t, e.send(call{key: "k1", body: `{}`}), 503, exchange.ProblemStoreUnavailable)
		e.wantCalls(t, 0)
		e.must(t, call{method: http.MethodGet, key: "k1"}, 200)
	}},
	{name: "Store/RolledBackNotDelivered", config: func(c *idem.Config) { c.Store = &rollsBackOnce{Store: c.Store} }, run: func(t *testing.T, e *env) {
		// The store's transaction, holding the handler's writes, fails to
		// commit: the 201 the handler wrote describes nothing, so the
		// client must not receive it, and its retry runs the handler again.
		// An adapter whose response may be under way breaks the connection;
		// one that can still replace it answers 503 store-unavailable.
		if r := e.send(call{key: "k1", body: `{"a":1}`}); r.err == nil {
			if r.status != 503 {
				t.Fatalf("got %d %s for a request whose work was rolled back, want a broken connection or a 503", r.status, r.body)
			}
			wantProblem(t, r, 503, exchange.ProblemStoreUnavailable)
		}
		e.wantCalls(t, 1)
		e.must(t, call{key: "k1", body: `{"a":1}`}, 201)
		e.wantCalls(t, 2)
	}},
	{name: "Store/LockLostNotDelivered", config: func(c *idem.Config) { c.Store = &losesLockOnce{Store: c.Store} }, run: func(t *testing.T, e *env) {
		// By the time the response is recorded another request holds the
		// key (an operator forgot the record, or the lease ran out and a
		// retry took over): the response is not the key's outcome, so the
		// client must not receive it as one. Its retry runs again here, as
		// the record was forgotten.
		if r := e.send(call{key: "k1", body: `{"a":1}`}); r.err == nil {
			wantProblem(t, r, 503, exchange.ProblemStoreUnavailable)
		}
		e.wantCalls(t, 1)
		e.must(t, call{key: "k1", body: `{"a":1}`}, 201)
		e.wantCalls(t, 2)
	}},
	{name: "Store/RolledBackWithRelease", config: func(c *idem.Config) { c.Store = rollsBackReleases{Store: c.Store} }, run: func(t *testing.T, e *env) {
		// A transactional store undoes the handler's writes with a response
		// it does not record (here, one over MaxResponseBody): a 200 for
		// work undone must not reach the client whole.
		c := call{key: "k1", path: fmt.Sprintf("/big?size=%d", maxResponseBody+1)}
		if r := e.send(c); r.err == nil {
			wantProblem(t, r, 503, exchange.ProblemStoreUnavailable)
		}
		// A response the policy does not record and whose work is undone
		// anyway (a 5xx) goes out as it is: it reports no success.
		e.must(t, call{key: "k2", path: "/status?code=500"}, 500)
		e.wantCalls(t, 2)
	}},
	{name: "Store/FailOpen", config: func(c *idem.Config) { c.Store, c.FailOpen = failingStore{}, true }, run: func(t *testing.T, e *env) {
		e.must(t, call{key: "k1", body: `{"a":1}`}, 201)
		e.must(t, call{key: "k1", body: `{"a":1}`}, 201)
		e.wantCalls(t, 2)
	}},
}

// recv receives from ch, or fails the test naming what never came.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never came", what)
		panic("unreachable")
	}
}

// cutOffRenewals configures a store whose Renew always fails, as for an
// instance cut off from it: its leases run out while its handlers run.
func cutOffRenewals(c *idem.Config) {
	c.Store = failingRenewals{Store: c.Store, failing: alwaysFailing}
}

var alwaysFailing = func() *atomic.Bool { var b atomic.Bool; b.Store(true); return &b }()

// failingRenewals fails Renew while failing is set (and hides any batch
// renewal of the store it wraps, so the Engine calls Renew).
type failingRenewals struct {
	idem.Store
	failing *atomic.Bool
}

func (s failingRenewals) Renew(ctx context.Context, id idem.ID, token string, until time.Time) error {
	if s.failing.Load() {
		return errUnreachable
	}
	return s.Store.Renew(ctx, id, token, until)
}

func waitEntered(t *testing.T, e *env) {
	t.Helper()
	select {
	case <-e.app.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow handler never started")
	}
}

// rollsBackOnce fails its first Complete as a transactional store does
// when the commit fails: the handler's writes are gone with it.
type rollsBackOnce struct {
	idem.Store
	failed atomic.Bool
}

func (s *rollsBackOnce) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	if s.failed.CompareAndSwap(false, true) {
		return fmt.Errorf("idemtest: commit failed: %w", idem.ErrRolledBack)
	}
	return s.Store.Complete(ctx, id, token, c)
}

// losesLockOnce forgets the record of its first Complete before it
// lands, as an operator's forced forget does: the completion finds no
// record its token holds.
type losesLockOnce struct {
	idem.Store
	lost atomic.Bool
}

func (s *losesLockOnce) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	if s.lost.CompareAndSwap(false, true) {
		if err := s.Store.Release(ctx, id, token); err != nil {
			return err
		}
		return idem.ErrLockLost
	}
	return s.Store.Complete(ctx, id, token, c)
}

// rollsBackReleases releases as a transactional store does when the
// handler wrote through its transaction: the writes are undone, and
// Release says so.
type rollsBackReleases struct{ idem.Store }

func (s rollsBackReleases) Release(ctx context.Context, id idem.ID, token string) error {
	if err := s.Store.Release(ctx, id, token); err != nil {
		return err
	}
	return fmt.Errorf("idemtest: the handler's transaction was rolled back: %w", idem.ErrRolledBack)
}

// failingStore is a store that cannot be reached.
type failingStore struct{}

var errUnreachable = errors.New("idemtest: store unreachable")

func (failingStore) Acquire(context.Context, idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	return idem.Record{}, 0, errUnreachable
}
func (failingStore) Renew(context.Context, idem.ID, string, time.Time) error { return errUnreachable }
func (failingStore) Complete(context.Context, idem.ID, string, idem.Completion) error {
	return errUnreachable
}
func (failingStore) Release(context.Context, idem.ID, string) error { return errUnreachable }
func (failingStore) Get(context.Context, idem.ID) (idem.Record, error) {
	return idem.Record{}, errUnreachable
}
func (failingStore) Purge(context.Context, time.Time, int) (int, error) { return 0, errUnreachable }
