package echotest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

// mount serves h behind the adapter, after Recover, for the conformance
// suites.
func (s *suite[C, H, M, O]) mount(tb testing.TB, e *idem.Engine, h http.Handler) string {
	scope := s.a.WithScope(func(c C) string { return c.Request().Header.Get(idemtest.ScopeHeader) })
	ec := s.a.New()
	ec.Use(s.a.Recover(), s.a.Middleware(e, scope))
	ec.Any("/*", s.a.WrapHandler(h))
	return Serve(tb, ec)
}

func (s *suite[C, H, M, O]) conformance(t *testing.T) {
	idemtest.TestMiddleware(t, s.mount)
}

func (s *suite[C, H, M, O]) responseWriter(t *testing.T) {
	idemtest.TestResponseWriter(t, s.mount)
}

func (s *suite[C, H, M, O]) keyFunc(t *testing.T) {
	idemtest.TestKeyFunc(t, func(tb testing.TB, e *idem.Engine, h http.Handler) string {
		key := s.a.WithKey(func(c C) (string, bool) {
			id := c.Request().Header.Get(idemtest.WebhookIDHeader)
			return id, id != ""
		})
		ec := s.a.New()
		ec.Use(s.a.Middleware(e, key))
		ec.Any("/*", s.a.WrapHandler(h))
		return Serve(tb, ec)
	})
}

func (s *suite[C, H, M, O]) skipper(t *testing.T) {
	idemtest.TestSkip(t, func(tb testing.TB, e *idem.Engine, h http.Handler) string {
		skip := func(c C) bool { return c.Request().Header.Get(idemtest.SkipHeader) == "1" }
		ec := s.a.New()
		ec.Use(s.a.Middleware(e, s.a.WithSkipper(skip)))
		ec.Any("/*", s.a.WrapHandler(h))
		return Serve(tb, ec)
	})
}

func (s *suite[C, H, M, O]) unmatchedRoutes(t *testing.T) {
	ec := s.a.New()
	ec.Use(s.a.Middleware(idem.New(idem.Config{Store: memstore.New()})))
	ec.POST("/charges", func(c C) error { return c.NoContent(201) })
	idemtest.TestUnmatchedRoutes(t, Serve(t, ec))
}

func (s *suite[C, H, M, O]) http2StreamReset(t *testing.T) {
	idemtest.TestHTTP2StreamReset(t, func(e *idem.Engine, h http.Handler) http.Handler {
		ec := s.a.New()
		ec.Use(s.a.Middleware(e))
		ec.Any("/*", s.a.WrapHandler(h))
		return ec
	})
}

// TimeoutInside: a timeout middleware inside idemkit (Adapter.TimeoutInside)
// answers while the handler goes on, and the key must stay locked. Echo
// hands the request's pooled context to the next request while the
// timeout's goroutine still uses it, which the race detector reports
// inside Echo, whatever idemkit does: the test runs in the test command's
// pass without -race, from a test named NoRace in a file built without it.
func TimeoutInside[C Ctx, H ~func(C) error, M ~func(H) H, O any](t *testing.T, a *Adapter[C, H, M, O]) {
	for _, msg := range []string{"", "custom timeout message"} {
		t.Run("message "+msg, func(t *testing.T) {
			idemtest.TestTimeoutInside(t, func(e *idem.Engine, h http.Handler) http.Handler {
				ec := a.New()
				ec.Use(a.Middleware(e), a.TimeoutInside(50*time.Millisecond, msg))
				ec.Any("/*", a.WrapHandler(h))
				return ec
			})
		})
	}
}

// counted is a handler creating a charge, counting its runs.
func (s *suite[C, H, M, O]) counted(calls *atomic.Int64) H {
	return func(c C) error {
		n := calls.Add(1)
		s.a.Response(c).Header().Set("Location", fmt.Sprintf("/v1/charges/ch_%d", n))
		return c.JSON(http.StatusCreated, map[string]string{"id": fmt.Sprintf("ch_%d", n)})
	}
}

func (s *suite[C, H, M, O]) registration(t *testing.T) {
	cases := []struct {
		name string
		// register mounts the guarded POST /v1/charges and an unguarded POST /other.
		register     func(ec App[C, H, M], mw M, h H)
		otherGuarded bool
	}{
		{name: "Use", otherGuarded: true, register: func(ec App[C, H, M], mw M, h H) {
			ec.Use(mw)
			ec.POST("/v1/charges", h)
			ec.POST("/other", h)
		}},
		{name: "Group", register: func(ec App[C, H, M], mw M, h H) {
			v1 := ec.Group("/v1", mw)
			v1.POST("/charges", h)
			ec.POST("/other", h)
		}},
		{name: "GroupUse", register: func(ec App[C, H, M], mw M, h H) {
			v1 := ec.Group("/v1")
			v1.Use(mw)
			v1.POST("/charges", h)
			ec.POST("/other", h)
		}},
		{name: "Route", register: func(ec App[C, H, M], mw M, h H) {
			ec.POST("/v1/charges", h, mw)
			ec.POST("/other", h)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int64
			ec := s.a.New()
			c.register(ec, s.a.Middleware(idemtest.NewEngine(t)), s.counted(&calls))
			url := Serve(t, ec)
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
func (s *suite[C, H, M, O]) problemErrors(c C, err error) {
	if s.a.Committed(c) {
		return
	}
	status := http.StatusInternalServerError
	if code := s.a.StatusCode(err); code != 0 {
		status = code
	}
	w := s.a.Response(c)
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": status, "detail": err.Error()})
}

func (s *suite[C, H, M, O]) errors(t *testing.T) {
	notFound, _ := json.Marshal(s.a.ErrNotFound.Error())
	cases := []struct {
		name         string
		errorHandler func(C, error) // nil: Echo's default
		handler      func(C) error
		Status       int
		Body         string // a part of the body the client must get
		stored       bool   // else not stored for its status
	}{
		{name: "HTTPError/404", Status: 404, Body: `"message":"Not Found"`, stored: true,
			handler: func(C) error { return s.a.NewHTTPError(404, "") }},
		{name: "HTTPError/422", Status: 422, Body: `"message":"invalid amount"`, stored: true,
			handler: func(C) error { return s.a.NewHTTPError(422, "invalid amount") }},
		{name: "HTTPError/409", Status: 409, stored: false,
			handler: func(C) error { return s.a.NewHTTPError(409, "") }},
		{name: "HTTPError/503", Status: 503, stored: false,
			handler: func(C) error { return s.a.NewHTTPError(503, "") }},
		{name: "PlainError", Status: 500, Body: `"message":"Internal Server Error"`, stored: false,
			handler: func(C) error { return errDatabase }},
		{name: "Written/404", Status: 404, Body: `"message":"Not Found"`, stored: true,
			handler: func(c C) error { return c.JSON(404, map[string]string{"message": "Not Found"}) }},
		{name: "Written/ThenError", Status: 201, Body: `"id":"ch_1"`, stored: true,
			handler: func(c C) error {
				_ = c.JSON(201, map[string]string{"id": "ch_1"})
				return errDatabase // too late: the response is committed
			}},
		{name: "CustomHandler/404", errorHandler: s.problemErrors, Status: 404, Body: `"detail":` + string(notFound), stored: true,
			handler: func(C) error { return s.a.ErrNotFound }},
		{name: "CustomHandler/500", errorHandler: s.problemErrors, Status: 500, Body: `"detail":"database down"`, stored: false,
			handler: func(C) error { return errDatabase }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int64
			var seen atomic.Int64 // the status the middleware before idemkit saw
			configure, events := idemtest.Outcomes()
			ec := s.a.New()
			if c.errorHandler != nil {
				ec.OnError(c.errorHandler)
			}
			ec.Use(func(next H) H {
				return func(ctx C) error {
					err := next(ctx)
					seen.Store(int64(s.a.Status(ctx)))
					return err
				}
			}, s.a.Middleware(idemtest.NewEngine(t, configure)))
			ec.POST("/v1/charges", func(ctx C) error {
				calls.Add(1)
				return c.handler(ctx)
			})
			url := Serve(t, ec)
			first := idemtest.Post(t, url+"/v1/charges", "k1", `{}`)
			if first.Status != c.Status || !strings.Contains(first.Body, c.Body) {
				t.Fatalf("got %d %s, want %d with %s", first.Status, first.Body, c.Status, c.Body)
			}
			if seen.Load() != int64(c.Status) {
				t.Fatalf("middleware before idemkit saw status %d, want %d", seen.Load(), c.Status)
			}
			if c.stored {
				idemtest.WantOutcome(t, events, idemevent.Stored, "")
			} else {
				idemtest.WantOutcome(t, events, idemevent.NotStored, exchange.ReasonStatus)
			}
			idemtest.WantStored(t, first, func() idemtest.Response { return idemtest.Post(t, url+"/v1/charges", "k1", `{}`) }, c.stored, &calls)
		})
	}
}

func (s *suite[C, H, M, O]) streaming(t *testing.T) {
	cases := []struct {
		name    string
		handler func(c C, n int64) error
		want    string
	}{
		{name: "SSE", want: "data: 2", handler: func(c C, n int64) error {
			res := s.a.Response(c)
			res.Header().Set("Content-Type", "text/event-stream")
			for i := 1; i <= 2; i++ {
				fmt.Fprintf(res, "data: %d of call %d\n\n", i, n)
				if err := s.a.Flush(c); err != nil {
					return err
				}
			}
			return nil
		}},
		{name: "ResponseController", want: "part 2", handler: func(c C, n int64) error {
			fmt.Fprintf(s.a.Response(c), "part 1 of call %d\n", n)
			if err := http.NewResponseController(s.a.Response(c)).Flush(); err != nil {
				return err
			}
			fmt.Fprintf(s.a.Response(c), "part 2 of call %d\n", n)
			return nil
		}},
		{name: "Hijack", want: "hijacked", handler: func(c C, n int64) error {
			conn, buf, err := s.a.Hijack(c)
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
			ec := s.a.New()
			ec.Use(s.a.Middleware(idemtest.NewEngine(t, configure)))
			ec.POST("/events", func(ctx C) error { return c.handler(ctx, calls.Add(1)) })
			url := Serve(t, ec)
			first := idemtest.Post(t, url+"/events", "k1", `{}`)
			if first.Status != 200 || !strings.Contains(first.Body, c.want) || !strings.Contains(first.Body, "call 1") {
				t.Fatalf("first: %d %q, want %q from call 1", first.Status, first.Body, c.want)
			}
			idemtest.WantOutcome(t, events, idemevent.NotStored, exchange.ReasonStreamed)
			second := idemtest.WantStored(t, first, func() idemtest.Response { return idemtest.Post(t, url+"/events", "k1", `{}`) }, false, &calls)
			if !strings.Contains(second.Body, "call 2") {
				t.Fatalf("second body %q is not from call 2", second.Body)
			}
		})
	}
}

func (s *suite[C, H, M, O]) panics(t *testing.T) {
	var calls atomic.Int64
	ec := s.a.New()
	ec.Use(s.a.Recover(), s.a.Middleware(idemtest.NewEngine(t)))
	ec.POST("/v1/charges", func(c C) error {
		if calls.Add(1) == 1 {
			panic("card network timeout")
		}
		return c.JSON(201, map[string]string{"id": "ch_2"})
	})
	url := Serve(t, ec)
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

func (s *suite[C, H, M, O]) binding(t *testing.T) {
	binders := []struct {
		name string
		bind func(C, any) error
	}{
		{"Bind", func(c C, v any) error { return c.Bind(v) }},
		{"BindBody", s.a.BindBody},
		{"Decoder", func(c C, v any) error { return json.NewDecoder(c.Request().Body).Decode(v) }},
	}
	const limit = 64
	for _, b := range binders {
		t.Run(b.name, func(t *testing.T) {
			var calls atomic.Int64
			ec := s.a.New()
			ec.Use(s.a.Middleware(idemtest.NewEngine(t, func(c *idem.Config) { c.MaxRequestBody = limit })))
			ec.POST("/v1/charges", func(c C) error {
				calls.Add(1)
				var ch charge
				if err := b.bind(c, &ch); err != nil {
					return s.a.NewHTTPError(400, err.Error())
				}
				return c.JSON(201, map[string]any{"charged": ch.Amount, "currency": ch.Currency})
			})
			url := Serve(t, ec)
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
			if big.Status != http.StatusRequestEntityTooLarge || big.Header.Get("Content-Type") != exchange.ProblemContentType {
				t.Fatalf("body over the limit: %d %s %s, want a 413 problem", big.Status, big.Header.Get("Content-Type"), big.Body)
			}
			if calls.Load() != 1 {
				t.Fatalf("handler ran %d times, want once: not for the oversized body", calls.Load())
			}
		})
	}
}

func (s *suite[C, H, M, O]) scope(t *testing.T) {
	var calls atomic.Int64
	// authenticate stands for the application's auth middleware, which runs
	// before idemkit and decides first.
	authenticate := func(next H) H {
		return func(c C) error {
			account, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
			if !ok {
				return s.a.ErrUnauthorized
			}
			c.Set("account", account)
			return next(c)
		}
	}
	account := s.a.WithScope(func(c C) string { s, _ := c.Get("account").(string); return s })
	ec := s.a.New()
	ec.Use(authenticate, s.a.Middleware(idemtest.NewEngine(t), account))
	ec.POST("/v1/charges", s.counted(&calls))
	url := Serve(t, ec)
	idemtest.WantScopedByAuth(t, url+"/v1/charges", &calls)
}

// earlyHints: a 103 Early Hints before the final status; the final one is
// what the client gets and what is stored.
func (s *suite[C, H, M, O]) earlyHints(t *testing.T) {
	var calls atomic.Int64
	ec := s.a.New()
	ec.Use(s.a.Middleware(idemtest.NewEngine(t)))
	ec.POST("/v1/charges", func(c C) error {
		calls.Add(1)
		s.a.Response(c).Header().Set("Link", "</receipt.css>; rel=preload")
		s.a.Writer(c).WriteHeader(http.StatusEarlyHints)
		return c.JSON(201, map[string]string{"id": "ch_1"})
	})
	url := Serve(t, ec)
	first := idemtest.Post(t, url+"/v1/charges", "k1", `{}`)
	if first.Status != 201 {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	idemtest.WantStored(t, first, func() idemtest.Response { return idemtest.Post(t, url+"/v1/charges", "k1", `{}`) }, true, &calls)
}

func (s *suite[C, H, M, O]) outerWriterRestored(t *testing.T) {
	var calls atomic.Int64
	var restored atomic.Bool
	// wrap stands for a middleware with its own writer, such as a gzip one.
	wrap := func(next H) H {
		return func(c C) error {
			w := &struct{ http.ResponseWriter }{s.a.Writer(c)}
			s.a.SetWriter(c, w)
			err := next(c)
			restored.Store(s.a.Writer(c) == http.ResponseWriter(w))
			return err
		}
	}
	ec := s.a.New()
	ec.Use(wrap, s.a.Middleware(idemtest.NewEngine(t)))
	ec.POST("/v1/charges", s.counted(&calls))
	url := Serve(t, ec)
	for _, key := range []string{"k1", "k1", ""} { // run, replay, problem
		restored.Store(false)
		idemtest.Post(t, url+"/v1/charges", key, `{}`)
		if !restored.Load() {
			t.Fatalf("key %q: the middleware before idemkit lost its writer", key)
		}
	}
}

// bodyLimitIs413, a defect: Echo's BodyLimit before idemkit refused a
// chunked body while idemkit read it, and the client got 400
// body-unreadable instead of 413.
func (s *suite[C, H, M, O]) bodyLimitIs413(t *testing.T) {
	ec := s.a.New()
	ec.Use(s.a.BodyLimit(1024), s.a.Middleware(idem.New(idem.Config{Store: memstore.New()})))
	var calls atomic.Int64
	ec.POST("/charges", s.counted(&calls))
	url := Serve(t, ec)
	req, _ := http.NewRequest(http.MethodPost, url+"/charges", io.MultiReader(strings.NewReader(strings.Repeat("x", 4096))))
	req.Header.Set("Idempotency-Key", `"k"`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 413 || !strings.Contains(string(body), exchange.ProblemPayloadTooLarge) || calls.Load() != 0 {
		t.Fatalf("chunked body over Echo's limit: %d %s (handler ran %d times), want 413 payload-too-large", resp.StatusCode, body, calls.Load())
	}
}
