package idemecho_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	idemecho "github.com/idemkit/idemkit/adapters/echo"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

func mount(tb testing.TB, e *idem.Engine, h http.Handler) string {
	scope := idemecho.WithScope(func(c echo.Context) string { return c.Request().Header.Get(idemtest.ScopeHeader) })
	ec := newEcho()
	ec.Use(middleware.Recover(), idemecho.Middleware(e, scope))
	ec.Any("/*", echo.WrapHandler(h))
	return start(tb, ec)
}

func TestConformance(t *testing.T) {
	idemtest.TestMiddleware(t, mount)
}

// newEcho is echo.New with its logger, where Recover prints the suite's
// expected panics, silenced.
func newEcho() *echo.Echo {
	ec := echo.New()
	ec.Logger.SetOutput(io.Discard)
	return ec
}

// start serves h on a loopback listener for the test's lifetime.
func start(tb testing.TB, h http.Handler) string {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv.URL
}

func newEngine(tb testing.TB, configure ...func(*idem.Config)) *idem.Engine {
	store := memstore.New(memstore.WithPurgeInterval(0))
	tb.Cleanup(func() { store.Close() })
	cfg := idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler)}
	for _, f := range configure {
		f(&cfg)
	}
	return idem.New(cfg)
}

// outcomes returns configuration that reports the end of each run lock, so
// a test can wait for the key's release rather than race it: a hijacked
// connection reaches the client before the handler returns.
func outcomes() (func(*idem.Config), <-chan idem.Event) {
	ch := make(chan idem.Event, 16)
	return func(c *idem.Config) {
		c.OnEvent = func(_ context.Context, ev idem.Event) {
			if ev.Kind == idem.EventStored || ev.Kind == idem.EventNotStored {
				ch <- ev
			}
		}
	}, ch
}

func wantOutcome(t *testing.T, events <-chan idem.Event, kind idem.EventKind, reason idem.Reason) {
	t.Helper()
	select {
	case ev := <-events:
		if ev.Kind != kind || ev.Reason != reason {
			t.Fatalf("outcome %s (reason %q), want %s (reason %q)", ev.Kind, ev.Reason, kind, reason)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s event", kind)
	}
}

type response struct {
	status int
	header http.Header
	body   string
}

func (r response) replayed() bool { return r.header.Get(idem.ReplayedHeader) == "true" }

// post sends a JSON POST; an empty key sends no Idempotency-Key, and
// header holds extra name, value pairs.
func post(t *testing.T, url, key, body string, header ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, string(b)}
}

// counted is a handler creating a charge, counting its runs.
func counted(calls *atomic.Int64) echo.HandlerFunc {
	return func(c echo.Context) error {
		n := calls.Add(1)
		c.Response().Header().Set("Location", fmt.Sprintf("/v1/charges/ch_%d", n))
		return c.JSON(http.StatusCreated, map[string]string{"id": fmt.Sprintf("ch_%d", n)})
	}
}

// wantStored sends the retry and checks that it replays first, or that
// the handler ran again for it.
func wantStored(t *testing.T, first response, retry func() response, stored bool, calls *atomic.Int64) response {
	t.Helper()
	before := calls.Load()
	second := retry()
	ran := calls.Load() - before
	if first.replayed() {
		t.Fatalf("first response is marked replayed: %v", first.header)
	}
	if second.status != first.status {
		t.Fatalf("retry status %d, want %d as the first", second.status, first.status)
	}
	switch {
	case stored && (!second.replayed() || second.body != first.body || ran != 0):
		t.Fatalf("want a replay of %q; got replayed=%v %q, handler ran %d more times", first.body, second.replayed(), second.body, ran)
	case !stored && (second.replayed() || ran != 1):
		t.Fatalf("want the handler to run again; got replayed=%v, handler ran %d more times", second.replayed(), ran)
	}
	return second
}

func TestRegistration(t *testing.T) {
	cases := []struct {
		name string
		// register mounts the guarded POST /v1/charges and an unguarded POST /other.
		register     func(ec *echo.Echo, mw echo.MiddlewareFunc, h echo.HandlerFunc)
		otherGuarded bool
	}{
		{name: "Use", otherGuarded: true, register: func(ec *echo.Echo, mw echo.MiddlewareFunc, h echo.HandlerFunc) {
			ec.Use(mw)
			ec.POST("/v1/charges", h)
			ec.POST("/other", h)
		}},
		{name: "Group", register: func(ec *echo.Echo, mw echo.MiddlewareFunc, h echo.HandlerFunc) {
			v1 := ec.Group("/v1", mw)
			v1.POST("/charges", h)
			ec.POST("/other", h)
		}},
		{name: "GroupUse", register: func(ec *echo.Echo, mw echo.MiddlewareFunc, h echo.HandlerFunc) {
			v1 := ec.Group("/v1")
			v1.Use(mw)
			v1.POST("/charges", h)
			ec.POST("/other", h)
		}},
		{name: "Route", register: func(ec *echo.Echo, mw echo.MiddlewareFunc, h echo.HandlerFunc) {
			ec.POST("/v1/charges", h, mw)
			ec.POST("/other", h)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int64
			ec := newEcho()
			c.register(ec, idemecho.Middleware(newEngine(t)), counted(&calls))
			url := start(t, ec)
			first := post(t, url+"/v1/charges", "k1", `{"amount":1}`)
			if first.status != http.StatusCreated || first.header.Get("Location") != "/v1/charges/ch_1" {
				t.Fatalf("first: %d %v %s", first.status, first.header, first.body)
			}
			wantStored(t, first, func() response { return post(t, url+"/v1/charges", "k1", `{"amount":1}`) }, true, &calls)
			if r := post(t, url+"/v1/charges", "", `{}`); r.status != http.StatusBadRequest {
				t.Fatalf("guarded route without a key: %d, want 400", r.status)
			}
			want := http.StatusCreated
			if c.otherGuarded {
				want = http.StatusBadRequest
			}
			if r := post(t, url+"/other", "", `{}`); r.status != want {
				t.Fatalf("POST /other without a key: %d, want %d", r.status, want)
			}
		})
	}
}

var errDatabase = errors.New("database down")

// problemErrors is a custom HTTPErrorHandler rendering problem details.
func problemErrors(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	status := http.StatusInternalServerError
	if he, ok := err.(*echo.HTTPError); ok {
		status = he.Code
	}
	c.Response().Header().Set("Content-Type", "application/problem+json")
	c.Response().WriteHeader(status)
	_ = json.NewEncoder(c.Response()).Encode(map[string]any{"status": status, "detail": err.Error()})
}

func TestErrors(t *testing.T) {
	cases := []struct {
		name         string
		errorHandler echo.HTTPErrorHandler // nil: Echo's default
		handler      echo.HandlerFunc
		status       int
		body         string // a part of the body the client must get
		stored       bool   // else not stored for its status
	}{
		{name: "HTTPError/404", status: 404, body: `"message":"Not Found"`, stored: true,
			handler: func(echo.Context) error { return echo.NewHTTPError(404) }},
		{name: "HTTPError/422", status: 422, body: `"message":"invalid amount"`, stored: true,
			handler: func(echo.Context) error { return echo.NewHTTPError(422, "invalid amount") }},
		{name: "HTTPError/409", status: 409, stored: false,
			handler: func(echo.Context) error { return echo.NewHTTPError(409) }},
		{name: "HTTPError/503", status: 503, stored: false,
			handler: func(echo.Context) error { return echo.NewHTTPError(503) }},
		{name: "PlainError", status: 500, body: `"message":"Internal Server Error"`, stored: false,
			handler: func(echo.Context) error { return errDatabase }},
		{name: "Written/404", status: 404, body: `"message":"Not Found"`, stored: true,
			handler: func(c echo.Context) error { return c.JSON(404, map[string]string{"message": "Not Found"}) }},
		{name: "Written/ThenError", status: 201, body: `"id":"ch_1"`, stored: true,
			handler: func(c echo.Context) error {
				_ = c.JSON(201, map[string]string{"id": "ch_1"})
				return errDatabase // too late: the response is committed
			}},
		{name: "CustomHandler/404", errorHandler: problemErrors, status: 404, body: `"detail":"code=404`, stored: true,
			handler: func(echo.Context) error { return echo.ErrNotFound }},
		{name: "CustomHandler/500", errorHandler: problemErrors, status: 500, body: `"detail":"database down"`, stored: false,
			handler: func(echo.Context) error { return errDatabase }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int64
			var seen atomic.Int64 // the status the middleware before idemkit saw
			configure, events := outcomes()
			ec := newEcho()
			if c.errorHandler != nil {
				ec.HTTPErrorHandler = c.errorHandler
			}
			ec.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(ctx echo.Context) error {
					err := next(ctx)
					seen.Store(int64(ctx.Response().Status))
					return err
				}
			}, idemecho.Middleware(newEngine(t, configure)))
			ec.POST("/v1/charges", func(ctx echo.Context) error {
				calls.Add(1)
				return c.handler(ctx)
			})
			url := start(t, ec)
			first := post(t, url+"/v1/charges", "k1", `{}`)
			if first.status != c.status || !strings.Contains(first.body, c.body) {
				t.Fatalf("got %d %s, want %d with %s", first.status, first.body, c.status, c.body)
			}
			if seen.Load() != int64(c.status) {
				t.Fatalf("middleware before idemkit saw status %d, want %d", seen.Load(), c.status)
			}
			if c.stored {
				wantOutcome(t, events, idem.EventStored, "")
			} else {
				wantOutcome(t, events, idem.EventNotStored, idem.ReasonStatus)
			}
			wantStored(t, first, func() response { return post(t, url+"/v1/charges", "k1", `{}`) }, c.stored, &calls)
		})
	}
}

func TestStreaming(t *testing.T) {
	cases := []struct {
		name    string
		handler func(c echo.Context, n int64) error
		want    string
	}{
		{name: "SSE", want: "data: 2", handler: func(c echo.Context, n int64) error {
			res := c.Response()
			res.Header().Set("Content-Type", "text/event-stream")
			for i := 1; i <= 2; i++ {
				fmt.Fprintf(res, "data: %d of call %d\n\n", i, n)
				res.Flush()
			}
			return nil
		}},
		{name: "ResponseController", want: "part 2", handler: func(c echo.Context, n int64) error {
			fmt.Fprintf(c.Response(), "part 1 of call %d\n", n)
			if err := http.NewResponseController(c.Response()).Flush(); err != nil {
				return err
			}
			fmt.Fprintf(c.Response(), "part 2 of call %d\n", n)
			return nil
		}},
		{name: "Hijack", want: "hijacked", handler: func(c echo.Context, n int64) error {
			conn, buf, err := c.Response().Hijack()
			if err != nil {
				return err
			}
			defer conn.Close()
			body := fmt.Sprintf("hijacked by call %d", n)
			fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
			return buf.Flush()
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int64
			configure, events := outcomes()
			ec := newEcho()
			ec.Use(idemecho.Middleware(newEngine(t, configure)))
			ec.POST("/events", func(ctx echo.Context) error { return c.handler(ctx, calls.Add(1)) })
			url := start(t, ec)
			first := post(t, url+"/events", "k1", `{}`)
			if first.status != 200 || !strings.Contains(first.body, c.want) || !strings.Contains(first.body, "call 1") {
				t.Fatalf("first: %d %q, want %q from call 1", first.status, first.body, c.want)
			}
			wantOutcome(t, events, idem.EventNotStored, idem.ReasonStreamed)
			second := wantStored(t, first, func() response { return post(t, url+"/events", "k1", `{}`) }, false, &calls)
			if !strings.Contains(second.body, "call 2") {
				t.Fatalf("second body %q is not from call 2", second.body)
			}
		})
	}
}

func TestPanic(t *testing.T) {
	var calls atomic.Int64
	ec := newEcho()
	ec.Use(middleware.Recover(), idemecho.Middleware(newEngine(t)))
	ec.POST("/v1/charges", func(c echo.Context) error {
		if calls.Add(1) == 1 {
			panic("card network timeout")
		}
		return c.JSON(201, map[string]string{"id": "ch_2"})
	})
	url := start(t, ec)
	if r := post(t, url+"/v1/charges", "k1", `{}`); r.status != 500 {
		t.Fatalf("panicking handler: %d, want Recover's 500", r.status)
	}
	retry := post(t, url+"/v1/charges", "k1", `{}`)
	if retry.status != 201 || retry.replayed() || calls.Load() != 2 {
		t.Fatalf("retry after a panic: %d replayed=%v after %d runs, want a fresh 201", retry.status, retry.replayed(), calls.Load())
	}
	wantStored(t, retry, func() response { return post(t, url+"/v1/charges", "k1", `{}`) }, true, &calls)
}

type charge struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

func TestBinding(t *testing.T) {
	binders := []struct {
		name string
		bind func(echo.Context, any) error
	}{
		{"Bind", func(c echo.Context, v any) error { return c.Bind(v) }},
		{"BindBody", func(c echo.Context, v any) error { return (&echo.DefaultBinder{}).BindBody(c, v) }},
		{"Decoder", func(c echo.Context, v any) error { return json.NewDecoder(c.Request().Body).Decode(v) }},
	}
	const limit = 64
	for _, b := range binders {
		t.Run(b.name, func(t *testing.T) {
			var calls atomic.Int64
			ec := newEcho()
			ec.Use(idemecho.Middleware(newEngine(t, func(c *idem.Config) { c.MaxRequestBody = limit })))
			ec.POST("/v1/charges", func(c echo.Context) error {
				calls.Add(1)
				var ch charge
				if err := b.bind(c, &ch); err != nil {
					return echo.NewHTTPError(400, err.Error())
				}
				return c.JSON(201, map[string]any{"charged": ch.Amount, "currency": ch.Currency})
			})
			url := start(t, ec)
			first := post(t, url+"/v1/charges", "k1", `{"amount":1999,"currency":"usd"}`)
			if first.status != 201 || strings.TrimSpace(first.body) != `{"charged":1999,"currency":"usd"}` {
				t.Fatalf("handler did not bind the body: %d %s", first.status, first.body)
			}
			// Reordered JSON is the same request.
			retry := func() response { return post(t, url+"/v1/charges", "k1", `{"currency":"usd", "amount":1999}`) }
			wantStored(t, first, retry, true, &calls)

			big := post(t, url+"/v1/charges", "k2", `{"amount":1,"pad":"`+strings.Repeat("x", limit)+`"}`)
			if big.status != http.StatusRequestEntityTooLarge || big.header.Get("Content-Type") != idem.ProblemContentType {
				t.Fatalf("body over the limit: %d %s %s, want a 413 problem", big.status, big.header.Get("Content-Type"), big.body)
			}
			if calls.Load() != 1 {
				t.Fatalf("handler ran %d times, want once: not for the oversized body", calls.Load())
			}
		})
	}
}

func TestScope(t *testing.T) {
	var calls atomic.Int64
	// authenticate stands for the application's auth middleware, which runs
	// before idemkit and decides first.
	authenticate := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			account, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
			if !ok {
				return echo.ErrUnauthorized
			}
			c.Set("account", account)
			return next(c)
		}
	}
	account := idemecho.WithScope(func(c echo.Context) string { s, _ := c.Get("account").(string); return s })
	ec := newEcho()
	ec.Use(authenticate, idemecho.Middleware(newEngine(t), account))
	ec.POST("/v1/charges", counted(&calls))
	url := start(t, ec)

	if r := post(t, url+"/v1/charges", "k1", `{"amount":1}`); r.status != 401 {
		t.Fatalf("unauthenticated: %d, want 401", r.status)
	}
	a := post(t, url+"/v1/charges", "k1", `{"amount":1}`, "Authorization", "Bearer acct_a")
	b := post(t, url+"/v1/charges", "k1", `{"amount":2}`, "Authorization", "Bearer acct_b")
	if a.status != 201 || b.status != 201 || a.replayed() || b.replayed() || calls.Load() != 2 {
		t.Fatalf("two accounts, one key: %d %d (replayed %v %v), %d runs; want two fresh 201s",
			a.status, b.status, a.replayed(), b.replayed(), calls.Load())
	}
	for _, c := range []struct {
		account, body string
		first         response
	}{{"acct_a", `{"amount":1}`, a}, {"acct_b", `{"amount":2}`, b}} {
		retry := func() response { return post(t, url+"/v1/charges", "k1", c.body, "Authorization", "Bearer "+c.account) }
		wantStored(t, c.first, retry, true, &calls)
	}
}

func TestEarlyHints(t *testing.T) {
	var calls atomic.Int64
	ec := newEcho()
	ec.Use(idemecho.Middleware(newEngine(t)))
	ec.POST("/v1/charges", func(c echo.Context) error {
		calls.Add(1)
		// Past echo.Response, which takes any status for the final one.
		c.Response().Header().Set("Link", "</receipt.css>; rel=preload")
		c.Response().Writer.WriteHeader(http.StatusEarlyHints)
		return c.JSON(201, map[string]string{"id": "ch_1"})
	})
	url := start(t, ec)
	first := post(t, url+"/v1/charges", "k1", `{}`)
	if first.status != 201 {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	wantStored(t, first, func() response { return post(t, url+"/v1/charges", "k1", `{}`) }, true, &calls)
}

func TestOuterWriterRestored(t *testing.T) {
	var calls atomic.Int64
	var restored atomic.Bool
	// wrap stands for a middleware with its own writer, such as a gzip one.
	wrap := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			w := struct{ http.ResponseWriter }{c.Response().Writer}
			c.Response().Writer = w
			err := next(c)
			restored.Store(c.Response().Writer == http.ResponseWriter(w))
			return err
		}
	}
	ec := newEcho()
	ec.Use(wrap, idemecho.Middleware(newEngine(t)))
	ec.POST("/v1/charges", counted(&calls))
	url := start(t, ec)
	for _, key := range []string{"k1", "k1", ""} { // run, replay, problem
		restored.Store(false)
		post(t, url+"/v1/charges", key, `{}`)
		if !restored.Load() {
			t.Fatalf("key %q: the middleware before idemkit lost its writer", key)
		}
	}
}
