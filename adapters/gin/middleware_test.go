package idemgin_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idemkit/adapters/gin"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode) // no route listing on stdout
	os.Exit(m.Run())
}

func mount(tb testing.TB, e *idem.Engine, h http.Handler) string {
	scope := idemgin.WithScope(func(c *gin.Context) string { return c.GetHeader(idemtest.ScopeHeader) })
	r := gin.New()
	r.Use(gin.RecoveryWithWriter(io.Discard), idemgin.Middleware(e, scope)) // the suite's panics are expected
	r.Any("/*path", gin.WrapH(h))
	return start(tb, r)
}

func TestConformance(t *testing.T) {
	idemtest.TestMiddleware(t, mount)
}

func TestKeyFunc(t *testing.T) {
	idemtest.TestKeyFunc(t, func(tb testing.TB, e *idem.Engine, h http.Handler) string {
		key := idemgin.WithKey(func(c *gin.Context) (string, bool) {
			id := c.GetHeader(idemtest.WebhookIDHeader)
			return id, id != ""
		})
		r := gin.New()
		r.Use(idemgin.Middleware(e, key))
		r.Any("/*path", gin.WrapH(h))
		return start(tb, r)
	})
}

func TestResponseWriter(t *testing.T) {
	idemtest.TestResponseWriter(t, mount)
}

// start serves r on a loopback listener for the test's lifetime.
func start(tb testing.TB, r http.Handler) string {
	srv := httptest.NewUnstartedServer(r)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv.URL
}

// counted is a handler creating a charge, counting its runs.
func counted(calls *atomic.Int64) gin.HandlerFunc {
	return func(c *gin.Context) {
		n := calls.Add(1)
		c.Header("Location", fmt.Sprintf("/v1/charges/ch_%d", n))
		c.JSON(http.StatusCreated, gin.H{"id": fmt.Sprintf("ch_%d", n)})
	}
}

func TestRegistration(t *testing.T) {
	cases := []struct {
		name string
		// register mounts the guarded POST /v1/charges and an unguarded POST /other.
		register     func(r *gin.Engine, mw, h gin.HandlerFunc)
		otherGuarded bool
	}{
		{name: "Use", otherGuarded: true, register: func(r *gin.Engine, mw, h gin.HandlerFunc) {
			r.Use(mw)
			r.POST("/v1/charges", h)
			r.POST("/other", h)
		}},
		{name: "Group", register: func(r *gin.Engine, mw, h gin.HandlerFunc) {
			v1 := r.Group("/v1", mw)
			v1.POST("/charges", h)
			r.POST("/other", h)
		}},
		{name: "GroupUse", register: func(r *gin.Engine, mw, h gin.HandlerFunc) {
			v1 := r.Group("/v1")
			v1.Use(mw)
			v1.POST("/charges", h)
			r.POST("/other", h)
		}},
		{name: "Route", register: func(r *gin.Engine, mw, h gin.HandlerFunc) {
			r.POST("/v1/charges", mw, h)
			r.POST("/other", h)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int64
			r := gin.New()
			c.register(r, idemgin.Middleware(idemtest.NewEngine(t)), counted(&calls))
			url := start(t, r)
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

// renderErrors is the usual Gin error middleware: it turns the errors a
// handler attached with c.Error into a JSON idemtest.Response.
func renderErrors(c *gin.Context) {
	c.Next()
	if len(c.Errors) == 0 || c.Writer.Size() > 0 {
		return // no error, or a idemtest.Response already sent: log-only errors
	}
	status := http.StatusInternalServerError
	if errors.Is(c.Errors.Last().Err, errNotFound) {
		status = http.StatusNotFound
	}
	if c.Writer.Written() {
		status = -1 // keep the status AbortWithError already sent
	}
	c.JSON(status, gin.H{"error": c.Errors.Last().Error()})
}

// unrendered is the reason for errors left to a middleware before idemkit.
const unrendered = exchange.ReasonIncomplete

var (
	errNotFound = errors.New("charge not found")
	errDatabase = errors.New("database down")
)

func TestErrors(t *testing.T) {
	cases := []struct {
		name         string
		outer, inner []gin.HandlerFunc // registered before and after idemkit
		handler      func(*gin.Context)
		Status       int
		stored       bool
		reason       exchange.Reason // why not stored
	}{
		{name: "AbortWithStatusJSON/4xx", Status: 422, stored: true,
			handler: func(c *gin.Context) { c.AbortWithStatusJSON(422, gin.H{"error": "invalid amount"}) }},
		{name: "AbortWithStatusJSON/5xx", Status: 503, reason: exchange.ReasonStatus,
			handler: func(c *gin.Context) { c.AbortWithStatusJSON(503, gin.H{"error": "try later"}) }},
		{name: "AbortWithStatus", Status: 404, stored: true,
			handler: func(c *gin.Context) { c.AbortWithStatus(404) }},
		{name: "Error/RenderedInside/4xx", inner: []gin.HandlerFunc{renderErrors}, Status: 404, stored: true,
			handler: func(c *gin.Context) { _ = c.Error(errNotFound) }},
		{name: "Error/RenderedInside/5xx", inner: []gin.HandlerFunc{renderErrors}, Status: 500, reason: exchange.ReasonStatus,
			handler: func(c *gin.Context) { _ = c.Error(errDatabase) }},
		{name: "AbortWithError/RenderedInside", inner: []gin.HandlerFunc{renderErrors}, Status: 404, stored: true,
			handler: func(c *gin.Context) { _ = c.AbortWithError(404, errNotFound) }},
		// Rendered after idemkit's turn: the stored idemtest.Response would not be
		// what the client got, so nothing is stored.
		{name: "Error/RenderedOutside/4xx", outer: []gin.HandlerFunc{renderErrors}, Status: 404, reason: unrendered,
			handler: func(c *gin.Context) { _ = c.Error(errNotFound) }},
		{name: "Error/RenderedOutside/5xx", outer: []gin.HandlerFunc{renderErrors}, Status: 500, reason: unrendered,
			handler: func(c *gin.Context) { _ = c.Error(errDatabase) }},
		{name: "AbortWithError/RenderedOutside", outer: []gin.HandlerFunc{renderErrors}, Status: 404, reason: unrendered,
			handler: func(c *gin.Context) { _ = c.AbortWithError(404, errNotFound) }},
		// An error attached beside a written idemtest.Response is only logged.
		{name: "Error/WithResponse", outer: []gin.HandlerFunc{renderErrors}, Status: 201, stored: true,
			handler: func(c *gin.Context) {
				c.JSON(201, gin.H{"id": "ch_1"})
				_ = c.Error(errDatabase)
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int64
			configure, events := idemtest.Outcomes()
			r := gin.New()
			r.Use(c.outer...)
			r.Use(idemgin.Middleware(idemtest.NewEngine(t, configure)))
			r.Use(c.inner...)
			r.POST("/v1/charges", func(ctx *gin.Context) {
				calls.Add(1)
				c.handler(ctx)
			})
			url := start(t, r)
			first := idemtest.Post(t, url+"/v1/charges", "k1", `{}`)
			if first.Status != c.Status {
				t.Fatalf("status %d, want %d; body %s", first.Status, c.Status, first.Body)
			}
			if c.stored {
				idemtest.WantOutcome(t, events, idemevent.Stored, "")
			} else {
				idemtest.WantOutcome(t, events, idemevent.NotStored, c.reason)
			}
			idemtest.WantStored(t, first, func() idemtest.Response { return idemtest.Post(t, url+"/v1/charges", "k1", `{}`) }, c.stored, &calls)
		})
	}
}

func TestStreaming(t *testing.T) {
	cases := []struct {
		name    string
		handler func(c *gin.Context, n int64)
		want    string
	}{
		{name: "Stream", want: "event:tick\ndata:2", handler: func(c *gin.Context, n int64) {
			i := 0
			c.Stream(func(io.Writer) bool {
				i++
				c.SSEvent("tick", fmt.Sprintf("%d of call %d", i, n))
				return i < 2
			})
		}},
		{name: "Flush", want: "part 2", handler: func(c *gin.Context, n int64) {
			c.Header("Content-Type", "text/plain")
			c.String(200, "part 1 of call %d\n", n)
			c.Writer.Flush()
			c.String(200, "part 2 of call %d\n", n)
		}},
		{name: "ResponseController", want: "part 2", handler: func(c *gin.Context, n int64) {
			c.String(200, "part 1 of call %d\n", n)
			if err := http.NewResponseController(c.Writer).Flush(); err != nil {
				panic(err)
			}
			c.String(200, "part 2 of call %d\n", n)
		}},
		{name: "Hijack", want: "hijacked", handler: func(c *gin.Context, n int64) {
			conn, buf, err := c.Writer.Hijack()
			if err != nil {
				panic(err)
			}
			defer conn.Close()
			body := fmt.Sprintf("hijacked by call %d", n)
			fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
			_ = buf.Flush()
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int64
			configure, events := idemtest.Outcomes()
			r := gin.New()
			r.Use(idemgin.Middleware(idemtest.NewEngine(t, configure)))
			r.POST("/events", func(ctx *gin.Context) { c.handler(ctx, calls.Add(1)) })
			url := start(t, r)
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

func TestPanic(t *testing.T) {
	var calls atomic.Int64
	r := gin.New()
	r.Use(gin.RecoveryWithWriter(io.Discard), idemgin.Middleware(idemtest.NewEngine(t)))
	r.POST("/v1/charges", func(c *gin.Context) {
		if calls.Add(1) == 1 {
			panic("card network timeout")
		}
		c.JSON(201, gin.H{"id": "ch_2"})
	})
	url := start(t, r)
	if r := idemtest.Post(t, url+"/v1/charges", "k1", `{}`); r.Status != 500 {
		t.Fatalf("panicking handler: %d, want gin.Recovery's 500", r.Status)
	}
	retry := idemtest.Post(t, url+"/v1/charges", "k1", `{}`)
	if retry.Status != 201 || retry.Replayed() || calls.Load() != 2 {
		t.Fatalf("retry after a panic: %d replayed=%v after %d runs, want a fresh 201", retry.Status, retry.Replayed(), calls.Load())
	}
	idemtest.WantStored(t, retry, func() idemtest.Response { return idemtest.Post(t, url+"/v1/charges", "k1", `{}`) }, true, &calls)
}

type charge struct {
	Amount   int64  `json:"amount" form:"amount" binding:"required"`
	Currency string `json:"currency" form:"currency"`
}

func TestBinding(t *testing.T) {
	binders := []struct {
		name string
		bind func(*gin.Context, any) error
	}{
		{"ShouldBindJSON", (*gin.Context).ShouldBindJSON},
		{"ShouldBind", (*gin.Context).ShouldBind},
		{"BindJSON", (*gin.Context).BindJSON},
		{"ShouldBindBodyWithJSON", (*gin.Context).ShouldBindBodyWithJSON},
	}
	const limit = 64
	for _, b := range binders {
		t.Run(b.name, func(t *testing.T) {
			var calls atomic.Int64
			r := gin.New()
			r.Use(idemgin.Middleware(idemtest.NewEngine(t, func(c *idem.Config) { c.MaxRequestBody = limit })))
			r.POST("/v1/charges", func(c *gin.Context) {
				calls.Add(1)
				var ch charge
				if err := b.bind(c, &ch); err != nil {
					c.AbortWithStatusJSON(400, gin.H{"error": err.Error()})
					return
				}
				c.JSON(201, gin.H{"charged": ch.Amount, "currency": ch.Currency})
			})
			url := start(t, r)
			first := idemtest.Post(t, url+"/v1/charges", "k1", `{"amount":1999,"currency":"usd"}`)
			if first.Status != 201 || first.Body != `{"charged":1999,"currency":"usd"}` {
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

func TestScope(t *testing.T) {
	var calls atomic.Int64
	// authenticate stands for the application's auth middleware, which runs
	// before idemkit and decides first.
	authenticate := func(c *gin.Context) {
		account, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
		if !ok {
			c.AbortWithStatusJSON(401, gin.H{"error": "unauthenticated"})
			return
		}
		c.Set("account", account)
	}
	account := idemgin.WithScope(func(c *gin.Context) string { return c.GetString("account") })
	r := gin.New()
	r.Use(authenticate, idemgin.Middleware(idemtest.NewEngine(t), account))
	r.POST("/v1/charges", counted(&calls))
	url := start(t, r)
	idemtest.WantScopedByAuth(t, url+"/v1/charges", &calls)
}

func TestWriters(t *testing.T) {
	cases := []struct {
		name  string
		write func(c *gin.Context)
	}{
		{"Write", func(c *gin.Context) { _, _ = c.Writer.Write([]byte(`{"id":"ch_1"}`)) }},
		{"WriteString", func(c *gin.Context) { _, _ = c.Writer.WriteString(`{"id":"ch_1"}`) }},
		{"io.WriteString", func(c *gin.Context) { _, _ = io.WriteString(c.Writer, `{"id":`+`"ch_1"}`) }},
		{"String", func(c *gin.Context) { c.String(201, `{"id":"ch_1"}`) }},
		{"JSON", func(c *gin.Context) { c.JSON(201, gin.H{"id": "ch_1"}) }},
		{"Data", func(c *gin.Context) { c.Data(201, "application/json", []byte(`{"id":"ch_1"}`)) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var calls atomic.Int64
			r := gin.New()
			r.Use(idemgin.Middleware(idemtest.NewEngine(t)))
			r.POST("/v1/charges", func(ctx *gin.Context) {
				calls.Add(1)
				ctx.Status(201)
				c.write(ctx)
			})
			url := start(t, r)
			first := idemtest.Post(t, url+"/v1/charges", "k1", `{}`)
			if first.Status != 201 || first.Body != `{"id":"ch_1"}` {
				t.Fatalf("first: %d %q", first.Status, first.Body)
			}
			idemtest.WantStored(t, first, func() idemtest.Response { return idemtest.Post(t, url+"/v1/charges", "k1", `{}`) }, true, &calls)
		})
	}
}

// wrappedWriter stands for a middleware's own writer, such as a gzip one.
type wrappedWriter struct{ gin.ResponseWriter }

func TestOuterWriterRestored(t *testing.T) {
	var calls atomic.Int64
	var restored atomic.Bool
	wrap := func(c *gin.Context) {
		w := &wrappedWriter{c.Writer}
		c.Writer = w
		c.Next()
		restored.Store(c.Writer == gin.ResponseWriter(w))
	}
	r := gin.New()
	r.Use(wrap, idemgin.Middleware(idemtest.NewEngine(t)))
	r.POST("/v1/charges", counted(&calls))
	url := start(t, r)
	for _, key := range []string{"k1", "k1", ""} { // run, replay, problem
		restored.Store(false)
		idemtest.Post(t, url+"/v1/charges", key, `{}`)
		if !restored.Load() {
			t.Fatalf("key %q: the middleware before idemkit lost its writer", key)
		}
	}
}

func TestHTTP2StreamReset(t *testing.T) {
	idemtest.TestHTTP2StreamReset(t, func(e *idem.Engine, h http.Handler) http.Handler {
		r := gin.New()
		r.Use(idemgin.Middleware(e))
		r.Any("/*path", gin.WrapH(h))
		return r
	})
}

func TestUnmatchedRoutes(t *testing.T) {
	r := gin.New()
	r.Use(idemgin.Middleware(idem.New(idem.Config{Store: memstore.New()})))
	r.HandleMethodNotAllowed = true
	r.POST("/charges", func(c *gin.Context) { c.Status(201) })
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	idemtest.TestUnmatchedRoutes(t, srv.URL)
}

func TestSkip(t *testing.T) {
	idemtest.TestSkip(t, func(tb testing.TB, e *idem.Engine, h http.Handler) string {
		skip := idemgin.WithSkip(func(c *gin.Context) bool { return c.GetHeader(idemtest.SkipHeader) == "1" })
		r := gin.New()
		r.Use(idemgin.Middleware(e, skip))
		r.Any("/*path", gin.WrapH(h))
		return start(tb, r)
	})
}
