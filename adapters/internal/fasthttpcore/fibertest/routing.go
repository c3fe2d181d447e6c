package fibertest

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

// mount serves h behind the adapter for the conformance suite.
func (s *suite[C, O]) mount(tb testing.TB, e *idem.Engine, h http.Handler) string {
	app := s.a.NewApp(Config[C]{})
	app.Use(s.a.Recover())
	app.Use(s.a.New(e, s.a.WithScope(func(c C) string {
		// c.Get aliases fasthttp's buffer. The adapter copies the scope itself
		// (BuffersReused hands it c.Get as it is); copying is the habit for
		// any such value kept past the handler.
		return strings.Clone(c.Get(idemtest.ScopeHeader))
	})))
	app.All("/*", func(c C) error {
		// A Fiber handler finds the lock's context (HeldKey, lease-lost and
		// timeout cancellation) in its context (c.UserContext in Fiber v2,
		// c.Context in v3); a net/http handler behind the adaptor gets it as
		// its request context this way.
		ctx := s.a.Context(c)
		return s.a.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r.WithContext(ctx))
		}))(c)
	})
	return Listen(tb, app)
}

func (s *suite[C, O]) conformance(t *testing.T) {
	idemtest.TestMiddleware(t, s.mount)
}

func (s *suite[C, O]) keyFunc(t *testing.T) {
	idemtest.TestKeyFunc(t, func(tb testing.TB, e *idem.Engine, h http.Handler) string {
		key := s.a.WithKey(func(c C) (string, bool) {
			id := c.Get(idemtest.WebhookIDHeader) // aliases fasthttp's buffer: the middleware copies it
			return id, id != ""
		})
		app := s.a.NewApp(Config[C]{})
		app.Use(s.a.New(e, key))
		app.All("/*", s.a.HTTPHandler(h))
		return Listen(tb, app)
	})
}

func (s *suite[C, O]) next(t *testing.T) {
	idemtest.TestSkip(t, func(tb testing.TB, e *idem.Engine, h http.Handler) string {
		next := s.a.WithNext(func(c C) bool { return c.Get(idemtest.SkipHeader) == "1" })
		app := s.a.NewApp(Config[C]{})
		app.Use(s.a.New(e, next))
		app.All("/*", s.a.HTTPHandler(h))
		return Listen(tb, app)
	})
}

func (s *suite[C, O]) unmatchedRoutes(t *testing.T) {
	app := s.a.NewApp(Config[C]{})
	app.Use(s.a.New(idem.New(idem.Config{Store: memstore.New()})))
	app.Post("/charges", func(c C) error { return c.SendStatus(http.StatusCreated) })
	idemtest.TestUnmatchedRoutes(t, Listen(t, app))
}

func (s *suite[C, O]) registration(t *testing.T) {
	cases := []struct {
		name string
		// register mounts mw and h: guarded is the route behind mw;
		// unguarded, if any, a POST route that mw must not see.
		register  func(app App[C], mw, h func(C) error)
		unguarded string
	}{
		{name: "AppUse", register: func(app App[C], mw, h func(C) error) {
			app.Use(mw)
			app.Post("/v1/charges", h)
		}},
		{name: "Group", unguarded: "/public/charges", register: func(app App[C], mw, h func(C) error) {
			v1 := app.Group("/v1", mw)
			v1.Post("/charges", h)
			app.Post("/public/charges", h)
		}},
		{name: "Route", unguarded: "/v1/refunds", register: func(app App[C], mw, h func(C) error) {
			app.Post("/v1/charges", mw, h)
			app.Post("/v1/refunds", h)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, _ := newEngine(t, nil)
			app := s.a.NewApp(Config[C]{})
			h := &counter{}
			c.register(app, s.a.New(e), handle[C](h))

			first := do(t, app, "POST", "/v1/charges", "k1", `{"amount":1}`)
			if first.status != 201 {
				t.Fatalf("first: %d %s", first.status, first.body)
			}
			wantReplay(t, first, do(t, app, "POST", "/v1/charges", "k1", `{"amount":1}`))
			if r := do(t, app, "POST", "/v1/charges", "", `{}`); r.status != 400 || r.header.Get("Content-Type") != exchange.ProblemContentType {
				t.Fatalf("guarded route without a key: %d %s", r.status, r.body)
			}
			if got := h.n.Load(); got != 1 {
				t.Fatalf("handler ran %d times, want 1", got)
			}
			if c.unguarded == "" {
				return
			}
			for range 2 {
				if r := do(t, app, "POST", c.unguarded, "k1", `{}`); r.status != 201 || r.replayed() {
					t.Fatalf("unguarded route: %d replayed=%v", r.status, r.replayed())
				}
			}
			if r := do(t, app, "POST", c.unguarded, "", `{}`); r.status != 201 {
				t.Fatalf("unguarded route without a key: %d", r.status)
			}
		})
	}
}

func (s *suite[C, O]) errorHandler(t *testing.T) {
	customJSON := func(c C, err error) error {
		code := http.StatusUnprocessableEntity
		if fe, ok := s.a.ErrorCode(err); ok {
			code = fe
		}
		return status(c, code).JSON(map[string]any{"error": err.Error()})
	}
	const text = "text/plain; charset=utf-8"
	cases := []struct {
		name    string
		handler func(C, error) error // nil: Fiber's default
		err     error                // what the route returns; nil: it writes 404 itself
		status  int
		stored  bool
		ctype   string
	}{
		{name: "Default/Written404", status: 404, stored: true, ctype: text},
		{name: "Default/FiberError404", err: s.a.NewError(404, "no such customer"), status: 404, stored: true, ctype: text},
		{name: "Default/PlainError", err: errors.New("database down"), status: 500},
		{name: "Default/FiberError503", err: s.a.NewError(http.StatusServiceUnavailable), status: 503},
		{name: "Custom/JSON422", handler: customJSON, err: errors.New("amount must be positive"), status: 422, stored: true, ctype: s.a.JSONType},
		{name: "Custom/FiberError409", handler: customJSON, err: s.a.NewError(http.StatusConflict), status: 409},
		{name: "Custom/Fails", handler: func(C, error) error { return errors.New("renderer broken") },
			err: errors.New("database down"), status: 500},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, _ := newEngine(t, nil)
			var rendered atomic.Int64
			var cfg Config[C]
			if c.handler != nil {
				cfg.ErrorHandler = func(ctx C, err error) error {
					rendered.Add(1)
					return c.handler(ctx, err)
				}
			}
			app := s.a.NewApp(cfg)
			app.Use(s.a.New(e))
			var calls atomic.Int64
			app.Post("/charges", func(ctx C) error {
				calls.Add(1)
				if c.err == nil {
					return status(ctx, 404).SendString("no such customer")
				}
				return c.err
			})
			first := do(t, app, "POST", "/charges", "k1", `{}`)
			second := do(t, app, "POST", "/charges", "k1", `{}`)
			if first.status != c.status || second.status != c.status {
				t.Fatalf("statuses %d, %d, want %d (body %q)", first.status, second.status, c.status, first.body)
			}
			wantCalls := int64(2)
			if c.stored {
				wantReplay(t, first, second)
				if ct := second.header.Get("Content-Type"); ct != c.ctype {
					t.Fatalf("replayed Content-Type %q, want %q", ct, c.ctype)
				}
				wantCalls = 1
			} else if second.replayed() {
				t.Fatalf("a %d response was stored", c.status)
			}
			if got := calls.Load(); got != wantCalls {
				t.Fatalf("handler ran %d times, want %d", got, wantCalls)
			}
			if c.handler != nil && rendered.Load() != wantCalls {
				t.Fatalf("ErrorHandler ran %d times for %d errors", rendered.Load(), wantCalls)
			}
		})
	}
}
