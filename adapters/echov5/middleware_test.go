package idemecho_test

import (
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

	idemecho "github.com/idemkit/idemkit/adapters/echov5"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
)

func mount(tb testing.TB, e *idem.Engine, h http.Handler) string {
	scope := idemecho.WithScope(func(c *echo.Context) string { return c.Request().Header.Get(idemtest.ScopeHeader) })
	ec := newEcho()
	ec.Use(middleware.Recover(), idemecho.Middleware(e, scope))
	ec.Any("/*", echo.WrapHandler(h))
	return start(tb, ec)
}

func TestConformance(t *testing.T) {
	idemtest.TestMiddleware(t, mount)
}

func TestKeyFunc(t *testing.T) {
	idemtest.TestKeyFunc(t, func(tb testing.TB, e *idem.Engine, h http.Handler) string {
		key := idemecho.WithKey(func(c *echo.Context) (string, bool) {
			id := c.Request().Header.Get(idemtest.WebhookIDHeader)
			return id, id != ""
		})
		ec := newEcho()
		ec.Use(idemecho.Middleware(e, key))
		ec.Any("/*", echo.WrapHandler(h))
		srv := httptest.NewServer(ec)
		tb.Cleanup(srv.Close)
		return srv.URL
	})
}

func TestResponseWriter(t *testing.T) {
	idemtest.TestResponseWriter(t, mount)
}

// newEcho is echo.New with its logger, where the error handler reports the
// suite's expected panics, silenced.
func newEcho() *echo.Echo {
	ec := echo.New()
	ec.Logger = slog.New(slog.DiscardHandler)
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

// counted is a handler creating a charge, counting its runs.
func counted(calls *atomic.Int64) echo.HandlerFunc {
	return func(c *echo.Context) error {
		n := calls.Add(1)
		c.Response().Header().Set("Location", fmt.Sprintf("/v1/charges/ch_%d", n))
		return c.JSON(http.StatusCreated, map[string]string{"id": fmt.Sprintf("ch_%d", n)})
	}
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
			c.register(ec, idemecho.Middleware(idemtest.NewEngine(t)), counted(&calls))
			url := start(t, ec)
			first := idemtest.Post(t, url+"/v1/charges", "k1", `{"amount":1}`)
			if first.Status != http.StatusCreated || first.Header.Get("Location") != "/v1/charges/ch_1" {
				t.Fatalf("first: %d %v %s", first.Status, first.Header, first.Body)
			}
			idemtest.WantStored(t, first, func() idemtest.Response { return idemtest.Post(t, url+"/v1/charges", "k1", `{"amount":1}`) }, true, &calls)
			if r := idemtest.Post(t, url+"/v1/charges", "", `{}`); r.Status != http.StatusBadRequest {
				t.Fatalf("guarded route without a key: %d, want 400", r.Status)
			}
			want := http.StatusCreated
			if c.otherGuarded {
				want = http.StatusBadRequest
			}
			if r := idemtest.Post(t, url+"/other", "", `{}`); r.Status != want {
				t.Fatalf("POST /other without a key: %d, want %d", r.Status, want)
			}
		})
	}
}

var errDatabase = errors.New("database down")

// problemErrors is a custom HTTPErrorHandler rendering problem details.
func problemErrors(c *echo.Context, err error) {
	if r, _ := echo.UnwrapResponse(c.Response()); r != nil && r.Committed {
		return
	}
	status := http.StatusInternalServerError
	if code := echo.StatusCode(err); code != 0 {
		status = code
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
		Status       int
		Body         string // a part of the body the client must get
		stored       bool   // else not stored for its status
	}{
		{name: "HTTPError/404", Status: 404, Body: `"message":"Not Found"`, stored: true,
			handler: func(*echo.Context) error { return echo.NewHTTPError(404, "") }},
		{name: "HTTPError/422", Status: 422, Body: `"message":"invalid amount"`, stored: true,
			handler: func(*echo.Context) error { return echo.NewHTTPError(422, "invalid amount") }},
		{name: "HTTPError/409", Status: 409, stored: false,
			handler: func(*echo.Context) error { return echo.NewHTTPError(409, "") }},
		{name: "HTTPError/503", Status: 503, stored: false,
			handler: func(*echo.Context) error { return echo.NewHTTPError(503, "") }},
		{name: "PlainError", Status: 500, Body: `"message":"Internal Server Error"`, stored: false,
			handler: func(*echo.Context) error { return errDatabase }},
		{name: "Written/404", Status: 404, Body: `"message":"Not Found"`, stored: true,
			handler: func(c *echo.Context) error { return c.JSON(404, map[string]string{"message": "Not Found"}) }},
		{name: "Written/ThenError", Status: 201, Body: `"id":"ch_1"`, stored: true,
			handler: func(c *echo.Context) error {
				_ = c.JSON(201, map[string]string{"id": "ch_1"})
				return errDatabase // too late: the idemtest.Response is committed
			}},
		{name: "CustomHandler/404", errorHandler: problemErrors, Status: 404, Body: `"detail":"Not Found"`, stored: true,
			handler: func(*echo.Context) error { return echo.ErrNotFound }},
		{name: "CustomHandler/500", errorHandler: problemErrors, Status: 500, Body: `"detail":"database down"`, stored: false,
			handler: func(*echo.Context) error { return errDatabase }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int64
			var seen atomic.Int64 // the status the middleware before idemkit saw
			configure, events := idemtest.Outcomes()
			ec := newEcho()
			if c.errorHandler != nil {
				ec.HTTPErrorHandler = c.errorHandler
			}
			ec.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(ctx *echo.Context) error {
					err := next(ctx)
					if r, _ := echo.UnwrapResponse(ctx.Response()); r != nil {
						seen.Store(int64(r.Status))
					}
					return err
				}
			}, idemecho.Middleware(idemtest.NewEngine(t, configure)))
			ec.POST("/v1/charges", func(ctx *echo.Context) error {
				calls.Add(1)
				return c.handler(ctx)
			})
			url := start(t, ec)
			first := idemtest.Post(t, url+"/v1/charges", "k1", `{}`)
			if first.Status != c.Status || !strings.Contains(first.Body, c.Body) {
				t.Fatalf("got %d %s, want %d with %s", first.Status, first.Body, c.Status, c.Body)
			}
			if seen.Load() != int64(c.Status) {
				t.Fatalf("middleware before idemkit saw status %d, want %d", seen.Load(), c.Status)
			}
			if c.stored {
				idemtest.WantOutcome(t, events, idem.EventStored, "")
			} else {
				idemtest.WantOutcome(t, events, idem.EventNotStored, idem.ReasonStatus)
			}
			idemtest.WantStored(t, first, func() idemtest.Response { return idemtest.Post(t, url+"/v1/charges", "k1", `{}`) }, c.stored, &calls)
		})
	}
}

func TestStreaming(t *testing.T) {
	cases := []struct {
		name    string
		handler func(c *echo.Context, n int64) error
		want    string
	}{
		{name: "SSE", want: "data: 2", handler: func(c *echo.Context, n int64) error {
			res := c.Response()
			res.Header().Set("Content-Type", "text/event-stream")
			for i := 1; i <= 2; i++ {
				fmt.Fprintf(res, "data: %d of call %d\n\n", i, n)
				if err := http.NewResponseController(res).Flush(); err != nil {
					return err
				}
			}
			return nil
		}},
		{name: "ResponseController", want: "part 2", handler: func(c *echo.Context, n int64) error {
			fmt.Fprintf(c.Response(), "part 1 of call %d\n", n)
			if err := http.NewResponseController(c.Response()).Flush(); err != nil {
				return err
			}
			fmt.Fprintf(c.Response(), "part 2 of call %d\n", n)
			return nil
		}},
		{name: "Hijack", want: "hijacked", handler: func(c *echo.Context, n int64) error {
			conn, buf, err := http.NewResponseController(c.Response()).Hijack()
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
			configure, events := idemtest.Outcomes()
			ec := newEcho()
			ec.Use(idemecho.Middleware(idemtest.NewEngine(t, configure)))
			ec.POST("/events", func(ctx *echo.Context) error { return c.handler(ctx, calls.Add(1)) })
			url := start(t, ec)
			first := idemtest.Post(t, url+"/events", "k1", `{}`)
			if first.Status != 200 || !strings.Contains(first.Body, c.want) || !strings.Contains(first.Body, "call 1") {
				t.Fatalf("first: %d %q, want %q from call 1", first.Status, first.Body, c.want)
			}
			idemtest.WantOutcome(t, events, idem.EventNotStored, idem.ReasonStreamed)
			second := idemtest.WantStored(t, first, func() idemtest.Response { return idemtest.Post(t, url+"/events", "k1", `{}`) }, false, &calls)
			if !strings.Contains(second.Body, "call 2") {
				t.Fatalf("second body %q is not from call 2", second.Body)
			}
		})
	}
}

func TestPanic(t *testing.T) {
	var calls atomic.Int64
	ec := newEcho()
	ec.Use(middleware.Recover(), idemecho.Middleware(idemtest.NewEngine(t)))
	ec.POST("/v1/charges", func(c *echo.Context) error {
		if calls.Add(1) == 1 {
			panic("card network timeout")
		}
		return c.JSON(201, map[string]string{"id": "ch_2"})
	})
	url := start(t, ec)
	if r := idemtest.Post(t, url+"/v1/charges", "k1", `{}`); r.Status != 500 {
		t.Fatalf("panicking handler: %d, want Recover's 500", r.Status)
	}
	retry := idemtest.Post(t, url+"/v1/charges", "k1", `{}`)
	if retry.Status != 201 || retry.Replayed() || calls.Load() != 2 {
		t.Fatalf("retry after a panic: %d replayed=%v after %d runs, want a fresh 201", retry.Status, retry.Replayed(), calls.Load())
	}
	idemtest.WantStored(t, retry, func() idemtest.Response { return idemtest.Post(t, url+"/v1/charges", "k1", `{}`) }, true, &calls)
}

type charge struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

func TestBinding(t *testing.T) {
	binders := []struct {
		name string
		bind func(*echo.Context, any) error
	}{
		{"Bind", func(c *echo.Context, v any) error { return c.Bind(v) }},
		{"BindBody", func(c *echo.Context, v any) error { return echo.BindBody(c, v) }},
		{"Decoder", func(c *echo.Context, v any) error { return json.NewDecoder(c.Request().Body).Decode(v) }},
	}
	const limit = 64
	for _, b := range binders {
		t.Run(b.name, func(t *testing.T) {
			var calls atomic.Int64
			ec := newEcho()
			ec.Use(idemecho.Middleware(idemtest.NewEngine(t, func(c *idem.Config) { c.MaxRequestBody = limit })))
			ec.POST("/v1/charges", func(c *echo.Context) error {
				calls.Add(1)
				var ch charge
				if err := b.bind(c, &ch); err != nil {
					return echo.NewHTTPError(400, err.Error())
				}
				return c.JSON(201, map[string]any{"charged": ch.Amount, "currency": ch.Currency})
			})
			url := start(t, ec)
			first := idemtest.Post(t, url+"/v1/charges", "k1", `{"amount":1999,"currency":"usd"}`)
			if first.Status != 201 || strings.TrimSpace(first.Body) != `{"charged":1999,"currency":"usd"}` {
				t.Fatalf("handler did not bind the body: %d %s", first.Status, first.Body)
			}
			// Reordered JSON is the same request.
			retry := func() idemtest.Response {
				return idemtest.Post(t, url+"/v1/charges", "k1", `{"currency":"usd", "amount":1999}`)
			}
			idemtest.WantStored(t, first, retry, true, &calls)

			big := idemtest.Post(t, url+"/v1/charges", "k2", `{"amount":1,"pad":"`+strings.Repeat("x", limit)+`"}`)
			if big.Status != http.StatusRequestEntityTooLarge || big.Header.Get("Content-Type") != idem.ProblemContentType {
				t.Fatalf("body over the limit: %d %s %s, want a 413 problem", big.Status, big.Header.Get("Content-Type"), big.Body)
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
		return func(c *echo.Context) error {
			account, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
			if !ok {
				return echo.ErrUnauthorized
			}
			c.Set("account", account)
			return next(c)
		}
	}
	account := idemecho.WithScope(func(c *echo.Context) string { s, _ := c.Get("account").(string); return s })
	ec := newEcho()
	ec.Use(authenticate, idemecho.Middleware(idemtest.NewEngine(t), account))
	ec.POST("/v1/charges", counted(&calls))
	url := start(t, ec)

	if r := idemtest.Post(t, url+"/v1/charges", "k1", `{"amount":1}`); r.Status != 401 {
		t.Fatalf("unauthenticated: %d, want 401", r.Status)
	}
	a := idemtest.Post(t, url+"/v1/charges", "k1", `{"amount":1}`, "Authorization", "Bearer acct_a")
	b := idemtest.Post(t, url+"/v1/charges", "k1", `{"amount":2}`, "Authorization", "Bearer acct_b")
	if a.Status != 201 || b.Status != 201 || a.Replayed() || b.Replayed() || calls.Load() != 2 {
		t.Fatalf("two accounts, one key: %d %d (replayed %v %v), %d runs; want two fresh 201s",
			a.Status, b.Status, a.Replayed(), b.Replayed(), calls.Load())
	}
	for _, c := range []struct {
		account, body string
		first         idemtest.Response
	}{{"acct_a", `{"amount":1}`, a}, {"acct_b", `{"amount":2}`, b}} {
		retry := func() idemtest.Response {
			return idemtest.Post(t, url+"/v1/charges", "k1", c.body, "Authorization", "Bearer "+c.account)
		}
		idemtest.WantStored(t, c.first, retry, true, &calls)
	}
}

func TestEarlyHints(t *testing.T) {
	var calls atomic.Int64
	ec := newEcho()
	ec.Use(idemecho.Middleware(idemtest.NewEngine(t)))
	ec.POST("/v1/charges", func(c *echo.Context) error {
		calls.Add(1)
		c.Response().Header().Set("Link", "</receipt.css>; rel=preload")
		c.Response().WriteHeader(http.StatusEarlyHints)
		return c.JSON(201, map[string]string{"id": "ch_1"})
	})
	url := start(t, ec)
	first := idemtest.Post(t, url+"/v1/charges", "k1", `{}`)
	if first.Status != 201 {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	idemtest.WantStored(t, first, func() idemtest.Response { return idemtest.Post(t, url+"/v1/charges", "k1", `{}`) }, true, &calls)
}

func TestOuterWriterRestored(t *testing.T) {
	var calls atomic.Int64
	var restored atomic.Bool
	// wrap stands for a middleware with its own writer, such as Echo's
	// Gzip, which sets it with c.SetResponse.
	wrap := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			w := &struct{ http.ResponseWriter }{c.Response()}
			c.SetResponse(w)
			err := next(c)
			restored.Store(c.Response() == http.ResponseWriter(w))
			return err
		}
	}
	ec := newEcho()
	ec.Use(wrap, idemecho.Middleware(idemtest.NewEngine(t)))
	ec.POST("/v1/charges", counted(&calls))
	url := start(t, ec)
	for _, key := range []string{"k1", "k1", ""} { // run, replay, problem
		restored.Store(false)
		idemtest.Post(t, url+"/v1/charges", key, `{}`)
		if !restored.Load() {
			t.Fatalf("key %q: the middleware before idemkit lost its writer", key)
		}
	}
}

// Defect: Echo's BodyLimit before idemkit refused a chunked body while
// idemkit read it, and the client got 400 body-unreadable instead of 413.
func TestBodyLimitIs413(t *testing.T) {
	ec := newEcho()
	ec.Use(middleware.BodyLimit(1024), idemecho.Middleware(idem.New(idem.Config{Store: memstore.New()})))
	var calls atomic.Int64
	ec.POST("/charges", counted(&calls))
	url := start(t, ec)
	req, _ := http.NewRequest(http.MethodPost, url+"/charges", io.MultiReader(strings.NewReader(strings.Repeat("x", 4096))))
	req.Header.Set("Idempotency-Key", `"k"`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || !strings.Contains(string(body), idem.ProblemPayloadTooLarge) || calls.Load() != 0 {
		t.Fatalf("chunked body over Echo's limit: %d %s (handler ran %d times), want 413 payload-too-large", resp.StatusCode, body, calls.Load())
	}
}

func TestUnmatchedRoutes(t *testing.T) {
	ec := newEcho()
	ec.Use(idemecho.Middleware(idem.New(idem.Config{Store: memstore.New()})))
	ec.POST("/charges", func(c *echo.Context) error { return c.NoContent(201) })
	idemtest.TestUnmatchedRoutes(t, start(t, ec))
}

func TestSkipper(t *testing.T) {
	idemtest.TestSkip(t, func(tb testing.TB, e *idem.Engine, h http.Handler) string {
		// A middleware.Skipper, as Echo's own middleware configs take.
		var skip middleware.Skipper = func(c *echo.Context) bool { return c.Request().Header.Get(idemtest.SkipHeader) == "1" }
		ec := newEcho()
		ec.Use(idemecho.Middleware(e, idemecho.WithSkipper(skip)))
		ec.Any("/*", echo.WrapHandler(h))
		return start(tb, ec)
	})
}

func TestHTTP2StreamReset(t *testing.T) {
	idemtest.TestHTTP2StreamReset(t, func(e *idem.Engine, h http.Handler) http.Handler {
		ec := newEcho()
		ec.Use(idemecho.Middleware(e))
		ec.Any("/*", echo.WrapHandler(h))
		return ec
	})
}
