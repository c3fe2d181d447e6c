package idemfiber_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
	"github.com/valyala/fasthttp"

	idemfiber "github.com/idemkit/idemkit/adapters/fiber"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

// quietLogger silences fasthttp's log lines for the suite's expected panics.
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

func mount(tb testing.TB, e *idem.Engine, h http.Handler) string {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Server().Logger = quietLogger{}
	app.Use(recover.New())
	app.Use(idemfiber.New(e, idemfiber.WithScope(func(c *fiber.Ctx) string {
		// c.Get aliases fasthttp's buffer. The adapter copies the scope itself
		// (TestBuffersReused hands it c.Get as it is); copying is the habit
		// for any such value kept past the handler.
		return strings.Clone(c.Get(idemtest.ScopeHeader))
	})))
	app.All("/*", func(c *fiber.Ctx) error {
		// A Fiber handler finds the lock's context (HeldKey, lease-lost and
		// timeout cancellation) in c.UserContext(); a net/http handler
		// behind the adaptor gets it as its request context this way.
		uc := c.UserContext()
		return adaptor.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r.WithContext(uc))
		}))(c)
	})
	return listen(tb, app)
}

// listen serves app on a fresh 127.0.0.1 port until the test ends.
func listen(tb testing.TB, app *fiber.App) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- app.Listener(ln) }()
	tb.Cleanup(func() {
		if err := app.ShutdownWithTimeout(15 * time.Second); err != nil {
			tb.Error(err)
		}
		if err := <-served; err != nil {
			tb.Error(err)
		}
	})
	return "http://" + ln.Addr().String()
}

func TestKeyFunc(t *testing.T) {
	idemtest.TestKeyFunc(t, func(tb testing.TB, e *idem.Engine, h http.Handler) string {
		key := idemfiber.WithKey(func(c *fiber.Ctx) (string, bool) {
			id := c.Get(idemtest.WebhookIDHeader) // aliases fasthttp's buffer: the middleware copies it
			return id, id != ""
		})
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Use(idemfiber.New(e, key))
		app.All("/*", adaptor.HTTPHandler(h))
		return listen(tb, app)
	})
}

func TestConformance(t *testing.T) {
	idemtest.TestMiddleware(t, mount)
}

// events records what the engine reports.
type events struct {
	mu   sync.Mutex
	list []idem.Event
}

func (ev *events) add(_ context.Context, e idem.Event) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.list = append(ev.list, e)
}

// notStored returns the reasons of the EventNotStored events so far.
func (ev *events) notStored() []idem.Reason {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	var out []idem.Reason
	for _, e := range ev.list {
		if e.Kind == idem.EventNotStored {
			out = append(out, e.Reason)
		}
	}
	return out
}

func newEngine(tb testing.TB, configure func(*idem.Config)) (*idem.Engine, *events) {
	store := memstore.New(memstore.WithPurgeInterval(0))
	tb.Cleanup(func() { _ = store.Close() })
	ev := &events{}
	cfg := idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler), OnEvent: ev.add}
	if configure != nil {
		configure(&cfg)
	}
	return idem.New(cfg), ev
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (r reply) replayed() bool { return r.header.Get(idem.ReplayedHeader) == "true" }

// do sends one request through app.Test; key "" sends no key.
func do(t *testing.T, app *fiber.App, method, target, key, body string) reply {
	t.Helper()
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(idem.DefaultHeaderName, key)
	}
	resp, err := app.Test(req, 10_000)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func wantReplay(t *testing.T, first, r reply) {
	t.Helper()
	if first.replayed() || !r.replayed() {
		t.Fatalf("first replayed=%v, second replayed=%v: want false, true", first.replayed(), r.replayed())
	}
	if r.status != first.status || r.body != first.body || r.header.Get("Content-Type") != first.header.Get("Content-Type") {
		t.Fatalf("replay = %d %q (%s), want %d %q (%s)", r.status, r.body, r.header.Get("Content-Type"),
			first.status, first.body, first.header.Get("Content-Type"))
	}
}

// counter is a handler that counts its calls and answers 201 with the count.
type counter struct{ n atomic.Int64 }

func (h *counter) handle(c *fiber.Ctx) error {
	n := h.n.Add(1)
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"call": n, "path": c.Path()})
}

func TestRegistration(t *testing.T) {
	cases := []struct {
		name string
		// register mounts mw and h: guarded is the route behind mw;
		// unguarded, if any, a POST route that mw must not see.
		register  func(app *fiber.App, mw, h fiber.Handler)
		unguarded string
	}{
		{name: "AppUse", register: func(app *fiber.App, mw, h fiber.Handler) {
			app.Use(mw)
			app.Post("/v1/charges", h)
		}},
		{name: "Group", unguarded: "/public/charges", register: func(app *fiber.App, mw, h fiber.Handler) {
			v1 := app.Group("/v1", mw)
			v1.Post("/charges", h)
			app.Post("/public/charges", h)
		}},
		{name: "Route", unguarded: "/v1/refunds", register: func(app *fiber.App, mw, h fiber.Handler) {
			app.Post("/v1/charges", mw, h)
			app.Post("/v1/refunds", h)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, _ := newEngine(t, nil)
			app := fiber.New()
			h := &counter{}
			c.register(app, idemfiber.New(e), h.handle)

			first := do(t, app, "POST", "/v1/charges", "k1", `{"amount":1}`)
			if first.status != 201 {
				t.Fatalf("first: %d %s", first.status, first.body)
			}
			wantReplay(t, first, do(t, app, "POST", "/v1/charges", "k1", `{"amount":1}`))
			if r := do(t, app, "POST", "/v1/charges", "", `{}`); r.status != 400 || r.header.Get("Content-Type") != idem.ProblemContentType {
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

func TestErrorHandler(t *testing.T) {
	customJSON := func(c *fiber.Ctx, err error) error {
		code := fiber.StatusUnprocessableEntity
		var fe *fiber.Error
		if errors.As(err, &fe) {
			code = fe.Code
		}
		return c.Status(code).JSON(fiber.Map{"error": err.Error()})
	}
	cases := []struct {
		name    string
		handler fiber.ErrorHandler // nil: Fiber's default
		err     error              // what the route returns; nil: it writes 404 itself
		status  int
		stored  bool
		ctype   string
	}{
		{name: "Default/Written404", status: 404, stored: true, ctype: "text/plain; charset=utf-8"},
		{name: "Default/FiberError404", err: fiber.NewError(404, "no such customer"), status: 404, stored: true, ctype: "text/plain; charset=utf-8"},
		{name: "Default/PlainError", err: errors.New("database down"), status: 500},
		{name: "Default/FiberError503", err: fiber.ErrServiceUnavailable, status: 503},
		{name: "Custom/JSON422", handler: customJSON, err: errors.New("amount must be positive"), status: 422, stored: true, ctype: "application/json"},
		{name: "Custom/FiberError409", handler: customJSON, err: fiber.ErrConflict, status: 409},
		{name: "Custom/Fails", handler: func(*fiber.Ctx, error) error { return errors.New("renderer broken") },
			err: errors.New("database down"), status: 500},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, _ := newEngine(t, nil)
			var rendered atomic.Int64
			cfg := fiber.Config{}
			if c.handler != nil {
				cfg.ErrorHandler = func(ctx *fiber.Ctx, err error) error {
					rendered.Add(1)
					return c.handler(ctx, err)
				}
			}
			app := fiber.New(cfg)
			app.Use(idemfiber.New(e))
			var calls atomic.Int64
			app.Post("/charges", func(ctx *fiber.Ctx) error {
				calls.Add(1)
				if c.err == nil {
					return ctx.Status(404).SendString("no such customer")
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

func TestStreamedNotStored(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name   string
		stream func(c *fiber.Ctx, n int64) error
	}{
		{name: "BodyStreamWriter", stream: func(c *fiber.Ctx, n int64) error {
			c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
				fmt.Fprintf(w, "part 1 of call %d\n", n)
				_ = w.Flush()
				fmt.Fprintf(w, "part 2 of call %d\n", n)
			})
			return nil
		}},
		{name: "SendStream", stream: func(c *fiber.Ctx, n int64) error {
			return c.SendStream(strings.NewReader(fmt.Sprintf("part 1 of call %d\npart 2 of call %d\n", n, n)))
		}},
		{name: "SendFile", stream: func(c *fiber.Ctx, n int64) error {
			name := filepath.Join(dir, fmt.Sprintf("call-%d.txt", n))
			if err := os.WriteFile(name, fmt.Appendf(nil, "part 1 of call %d\npart 2 of call %d\n", n, n), 0o600); err != nil {
				return err
			}
			return c.SendFile(name)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, ev := newEngine(t, nil)
			app := fiber.New()
			app.Use(idemfiber.New(e))
			var calls atomic.Int64
			app.Post("/events", func(ctx *fiber.Ctx) error {
				ctx.Type("txt")
				return c.stream(ctx, calls.Add(1))
			})
			for n := 1; n <= 2; n++ {
				r := do(t, app, "POST", "/events", "k1", `{}`)
				want := fmt.Sprintf("part 1 of call %d\npart 2 of call %d\n", n, n)
				if r.status != 200 || r.replayed() || r.body != want {
					t.Fatalf("call %d: %d replayed=%v %q, want 200 %q", n, r.status, r.replayed(), r.body, want)
				}
			}
			if got := ev.notStored(); len(got) != 2 || got[0] != idem.ReasonStreamed || got[1] != idem.ReasonStreamed {
				t.Fatalf("not-stored reasons %v, want two %q", got, idem.ReasonStreamed)
			}
		})
	}
}

// TestHijackedNotStored: a handler that takes the connection over (as a
// WebSocket upgrade does) writes past fasthttp, so nothing can be stored.
func TestHijackedNotStored(t *testing.T) {
	e, ev := newEngine(t, nil)
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(idemfiber.New(e))
	var calls atomic.Int64
	app.Post("/upgrade", func(c *fiber.Ctx) error {
		n := calls.Add(1)
		c.Context().HijackSetNoResponse(true)
		c.Context().Hijack(func(conn net.Conn) {
			body := fmt.Sprintf("raw call %d", n)
			fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		})
		return nil
	})
	url := listen(t, app)
	for n := 1; n <= 2; n++ {
		req, err := http.NewRequest(http.MethodPost, url+"/upgrade", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(idem.DefaultHeaderName, "k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("raw call %d", n); err != nil || resp.StatusCode != 200 || string(b) != want {
			t.Fatalf("call %d: %d %q (%v), want 200 %q", n, resp.StatusCode, b, err, want)
		}
	}
	if got := ev.notStored(); len(got) != 2 || got[0] != idem.ReasonStreamed || got[1] != idem.ReasonStreamed {
		t.Fatalf("not-stored reasons %v, want two %q", got, idem.ReasonStreamed)
	}
}

func TestPanicReleasesKey(t *testing.T) {
	e, ev := newEngine(t, nil)
	app := fiber.New()
	app.Use(recover.New())
	app.Use(idemfiber.New(e))
	var calls atomic.Int64
	var panicking atomic.Bool
	panicking.Store(true)
	app.Post("/charges", func(c *fiber.Ctx) error {
		n := calls.Add(1)
		if panicking.Load() {
			panic("charge failed half-way")
		}
		return c.Status(201).SendString("charged by call " + strconv.FormatInt(n, 10))
	})
	if r := do(t, app, "POST", "/charges", "k1", `{}`); r.status != 500 {
		t.Fatalf("panicking handler: %d %q, want 500", r.status, r.body)
	}
	if got := ev.notStored(); len(got) != 1 || got[0] != idem.ReasonPanic {
		t.Fatalf("not-stored reasons %v, want [%s]", got, idem.ReasonPanic)
	}
	panicking.Store(false)
	retry := do(t, app, "POST", "/charges", "k1", `{}`)
	if retry.status != 201 || retry.replayed() || retry.body != "charged by call 2" {
		t.Fatalf("retry after a panic: %d replayed=%v %q", retry.status, retry.replayed(), retry.body)
	}
	wantReplay(t, retry, do(t, app, "POST", "/charges", "k1", `{}`))
	if calls.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", calls.Load())
	}
}

func TestBody(t *testing.T) {
	const limit = 64
	for _, cfg := range []struct {
		name   string
		config fiber.Config
		early  bool // a middleware before idemkit reads the body first
	}{
		{name: "Buffered", config: fiber.Config{}},
		{name: "StreamRequestBody", config: fiber.Config{StreamRequestBody: true}},
		{name: "StreamRequestBody/ReadBeforeIdemkit", config: fiber.Config{StreamRequestBody: true}, early: true},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			e, _ := newEngine(t, func(c *idem.Config) { c.MaxRequestBody = limit })
			app := fiber.New(cfg.config)
			if cfg.early {
				app.Use(func(c *fiber.Ctx) error {
					var probe map[string]any
					if err := c.BodyParser(&probe); err != nil {
						return fiber.NewError(fiber.StatusBadRequest, err.Error())
					}
					return c.Next()
				})
			}
			app.Use(idemfiber.New(e))
			var calls atomic.Int64
			app.Post("/charges", func(c *fiber.Ctx) error {
				calls.Add(1)
				var in struct {
					Amount   int    `json:"amount"`
					Currency string `json:"currency"`
				}
				if err := c.BodyParser(&in); err != nil {
					return fiber.NewError(fiber.StatusBadRequest, err.Error())
				}
				return c.Status(201).JSON(fiber.Map{"amount": in.Amount, "currency": in.Currency, "raw": len(c.Body())})
			})
			body := `{"amount":1999,"currency":"usd"}`
			first := do(t, app, "POST", "/charges", "k1", body)
			if want := fmt.Sprintf(`{"amount":1999,"currency":"usd","raw":%d}`, len(body)); first.status != 201 || first.body != want {
				t.Fatalf("handler saw %d %s, want 201 %s", first.status, first.body, want)
			}
			wantReplay(t, first, do(t, app, "POST", "/charges", "k1", "{ \"currency\": \"usd\", \"amount\": 1999 }"))

			big := `{"amount":1,"pad":"` + strings.Repeat("x", limit) + `"}`
			r := do(t, app, "POST", "/charges", "k2", big)
			if r.status != 413 || r.header.Get("Content-Type") != idem.ProblemContentType {
				t.Fatalf("oversized body: %d %s", r.status, r.body)
			}
			if calls.Load() != 1 {
				t.Fatalf("handler ran %d times, want 1", calls.Load())
			}
			// Not recorded: the key is free for a body within the limit.
			if r := do(t, app, "POST", "/charges", "k2", `{"amount":2}`); r.status != 201 || r.replayed() {
				t.Fatalf("k2 after the 413: %d replayed=%v", r.status, r.replayed())
			}
		})
	}
}

// TestMultipartForm: fasthttp parses multipart forms while reading the
// request unless told not to; a byte-identical retry must still be a replay.
func TestMultipartForm(t *testing.T) {
	const limit = 2048
	form := func(file string) (ctype string, body []byte) {
		var buf bytes.Buffer
		w := multipart.NewWriter(&buf)
		for i := range 8 { // enough fields for map order to differ between renderings
			_ = w.WriteField(fmt.Sprintf("field%d", i), strconv.Itoa(i))
		}
		_ = w.WriteField("purpose", "dispute_evidence")
		f, _ := w.CreateFormFile("file", "receipt.txt")
		_, _ = io.WriteString(f, file)
		_ = w.Close()
		return w.FormDataContentType(), buf.Bytes()
	}
	for _, cfg := range []struct {
		name   string
		config fiber.Config
	}{
		{"PreParsed", fiber.Config{}},
		{"PreParsed/StreamRequestBody", fiber.Config{StreamRequestBody: true}},
		{"Raw", fiber.Config{DisablePreParseMultipartForm: true}},
		{"Raw/StreamRequestBody", fiber.Config{DisablePreParseMultipartForm: true, StreamRequestBody: true}},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			e, _ := newEngine(t, func(c *idem.Config) { c.MaxRequestBody = limit })
			app := fiber.New(cfg.config)
			app.Use(idemfiber.New(e))
			var calls atomic.Int64
			app.Post("/files", func(c *fiber.Ctx) error {
				n := calls.Add(1)
				fh, err := c.FormFile("file")
				if err != nil {
					return fiber.NewError(fiber.StatusBadRequest, err.Error())
				}
				f, err := fh.Open()
				if err != nil {
					return err
				}
				defer f.Close()
				content, err := io.ReadAll(f)
				if err != nil {
					return err
				}
				return c.Status(201).SendString(fmt.Sprintf("call %d: %s %s %q", n, c.FormValue("purpose"), c.FormValue("field7"), content))
			})
			send := func(key string, ctype string, body []byte) reply {
				t.Helper()
				req := httptest.NewRequest(fiber.MethodPost, "/files", bytes.NewReader(body))
				req.Header.Set("Content-Type", ctype)
				req.Header.Set(idem.DefaultHeaderName, key)
				resp, err := app.Test(req, 10_000)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				return reply{resp.StatusCode, resp.Header, string(b)}
			}
			ctype, body := form("total: 19.99")
			first := send("k1", ctype, body)
			if want := `call 1: dispute_evidence 7 "total: 19.99"`; first.status != 201 || first.body != want {
				t.Fatalf("first: %d %q, want 201 %q", first.status, first.body, want)
			}
			for range 3 {
				wantReplay(t, first, send("k1", ctype, body))
			}
			otherType, other := form("total: 29.99")
			if r := send("k1", otherType, other); r.status != 422 {
				t.Fatalf("same key, another file: %d %q, want 422", r.status, r.body)
			}
			bigType, big := form(strings.Repeat("x", limit))
			if r := send("k2", bigType, big); r.status != 413 {
				t.Fatalf("form over the limit: %d %q, want 413", r.status, r.body)
			}
			if calls.Load() != 1 {
				t.Fatalf("handler ran %d times, want 1", calls.Load())
			}
		})
	}
}

// recordingStore keeps, for every ID acquired or completed, the strings the
// engine handed over next to a private copy, so a test can see whether
// fasthttp rewrote them later. The response given to Complete is only lent
// (a store copies what it keeps, per idem.Store), so its header values may
// alias fasthttp's buffers; the replays the test checks show they were
// whole when the store copied them.
type recordingStore struct {
	idem.Store
	mu   sync.Mutex
	kept [][2]string // as handed over, and as they read then
}

func (s *recordingStore) keep(vs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range vs {
		s.kept = append(s.kept, [2]string{v, strings.Clone(v)})
	}
}

func (s *recordingStore) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	s.keep(a.ID.Scope, a.ID.Key)
	return s.Store.Acquire(ctx, a)
}

func (s *recordingStore) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	s.keep(id.Scope, id.Key)
	return s.Store.Complete(ctx, id, token, c)
}

func (s *recordingStore) changed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, k := range s.kept {
		if k[0] != k[1] {
			out = append(out, fmt.Sprintf("%q became %q", k[1], k[0]))
		}
	}
	return out
}

// TestBuffersReused serves every request on one fasthttp.RequestCtx, as a
// keep-alive connection does, so each request is parsed into the buffers of
// the one before. The scope function returns c.Get's aliasing string on
// purpose: the middleware must copy it.
func TestBuffersReused(t *testing.T) {
	mem := memstore.New(memstore.WithPurgeInterval(0))
	defer mem.Close()
	store := &recordingStore{Store: mem}
	e := idem.New(idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler), ReplayHeaders: []string{"X-Charge"}})
	app := fiber.New()
	app.Use(idemfiber.New(e, idemfiber.WithScope(func(c *fiber.Ctx) string { return c.Get("X-Tenant") })))
	var calls int
	app.Post("/charges/:id", func(c *fiber.Ctx) error {
		calls++
		c.Set("Location", "/charges/"+c.Params("id"))
		c.Set("X-Charge", c.Params("id")+" "+c.Get("X-Tenant"))
		c.Set("Content-Type", c.Get("Content-Type"))
		return c.Status(201).Send(c.Body()) // the response body aliases the request's
	})
	srv := &ctxServer{handler: app.Handler()}
	serve := func(t *testing.T, tenant, key, id, ctype, body string) reply {
		t.Helper()
		return srv.serve(t, fmt.Sprintf("POST /charges/%s HTTP/1.1\r\nHost: api.test\r\nContent-Type: %s\r\nX-Tenant: %s\r\nIdempotency-Key: %s\r\nContent-Length: %d\r\n\r\n%s",
			id, ctype, tenant, key, len(body), body))
	}

	first := serve(t, "acct-a", "keep-0000", "ch_0000", "application/json", `{"amount":1000}`)
	if first.status != 201 || first.replayed() {
		t.Fatalf("first: %d replayed=%v", first.status, first.replayed())
	}
	const others = 150
	for i := 1; i <= others; i++ {
		// The same lengths as the first request, so the bytes are overwritten in place.
		r := serve(t, fmt.Sprintf("acct-%c", 'b'+i%20), fmt.Sprintf("othr-%04d", i), fmt.Sprintf("ch_%04d", i),
			"application/jsox", fmt.Sprintf(`{"amount":%04d}`, i))
		if r.status != 201 || r.replayed() {
			t.Fatalf("other request %d: %d replayed=%v", i, r.status, r.replayed())
		}
	}
	replay := serve(t, "acct-a", "keep-0000", "ch_0000", "application/json", `{"amount":1000}`)
	wantReplay(t, first, replay)
	for _, h := range []string{"Location", "X-Charge"} {
		if replay.header.Get(h) != first.header.Get(h) || first.header.Get(h) == "" {
			t.Fatalf("replayed %s = %q, want %q", h, replay.header.Get(h), first.header.Get(h))
		}
	}
	// Another tenant's use of the same key is a new request, not a mismatch.
	if r := serve(t, "acct-z", "keep-0000", "ch_0000", "application/json", `{"amount":9999}`); r.status != 201 || r.replayed() {
		t.Fatalf("same key, other tenant: %d replayed=%v", r.status, r.replayed())
	}
	if calls != others+2 {
		t.Fatalf("handler ran %d times, want %d", calls, others+2)
	}
	if changed := store.changed(); len(changed) > 0 {
		t.Fatalf("strings handed to the store changed after their request: %v", changed[:min(len(changed), 5)])
	}
}

// ctxServer serves raw HTTP/1.1 requests on one fasthttp.RequestCtx, as a
// keep-alive connection does: each request is parsed into the buffers of
// the one before.
type ctxServer struct {
	handler fasthttp.RequestHandler
	fctx    fasthttp.RequestCtx
}

func (s *ctxServer) serve(t *testing.T, raw string) reply {
	t.Helper()
	s.fctx.Request.Reset()
	s.fctx.Response.Reset()
	if err := s.fctx.Request.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	s.handler(&s.fctx)
	h := http.Header{}
	for k, v := range s.fctx.Response.Header.All() {
		h.Add(string(k), string(v))
	}
	return reply{s.fctx.Response.StatusCode(), h, string(s.fctx.Response.Body())}
}

// TestRequestRewritten checks that the method and path idemkit reports are
// the request's as received, even when a later handler rewrites the request
// in place, and that an absolute-form target maps to its path and query.
func TestRequestRewritten(t *testing.T) {
	var mu sync.Mutex
	var stored []string
	e, _ := newEngine(t, func(c *idem.Config) {
		c.OnEvent = func(_ context.Context, ev idem.Event) {
			if ev.Kind == idem.EventStored || ev.Kind == idem.EventReplay {
				mu.Lock()
				defer mu.Unlock()
				stored = append(stored, ev.Kind.String()+" "+ev.Method+" "+ev.Route)
			}
		}
	})
	app := fiber.New()
	app.Use(idemfiber.New(e))
	app.Post("/charges/:id", func(c *fiber.Ctx) error {
		// Same-length rewrites land in the buffers the request was read into.
		c.Request().Header.SetMethod("PUT")
		c.Request().SetRequestURI("/xxxxxxx/xxxx?y=2")
		return c.Status(201).SendString("created")
	})
	srv := &ctxServer{handler: app.Handler()}
	body := `{"amount":1}`
	for _, target := range []string{"/charges/ch_1?x=1", "http://api.test/charges/ch_1?x=1"} {
		r := srv.serve(t, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: api.test\r\nContent-Type: application/json\r\nIdempotency-Key: k1\r\nContent-Length: %d\r\n\r\n%s",
			target, len(body), body))
		if r.status != 201 {
			t.Fatalf("%s: %d %q", target, r.status, r.body)
		}
	}
	// The second request, in absolute form, replays the first: both have the
	// same method, path and query.
	want := []string{"stored POST /charges/ch_1", "replay POST /charges/ch_1"}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(stored, "; ") != strings.Join(want, "; ") {
		t.Fatalf("events %q, want %q", stored, want)
	}
}

func TestUnmatchedRoutes(t *testing.T) {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(idemfiber.New(idem.New(idem.Config{Store: memstore.New()})))
	app.Post("/charges", func(c *fiber.Ctx) error { return c.SendStatus(201) })
	idemtest.TestUnmatchedRoutes(t, listen(t, app))
}

func TestNext(t *testing.T) {
	idemtest.TestSkip(t, func(tb testing.TB, e *idem.Engine, h http.Handler) string {
		next := idemfiber.WithNext(func(c *fiber.Ctx) bool { return c.Get(idemtest.SkipHeader) == "1" })
		app := fiber.New(fiber.Config{DisableStartupMessage: true})
		app.Use(idemfiber.New(e, next))
		app.All("/*", adaptor.HTTPHandler(h))
		return listen(tb, app)
	})
}
