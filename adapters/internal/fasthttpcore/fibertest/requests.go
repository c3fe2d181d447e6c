package fibertest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/memstore"
)

func (s *suite[C, O]) body(t *testing.T) {
	const limit = 64
	for _, cfg := range []struct {
		name   string
		config Config[C]
		early  bool // a middleware before idemkit reads the body first
	}{
		{name: "Buffered"},
		{name: "StreamRequestBody", config: Config[C]{StreamRequestBody: true}},
		{name: "StreamRequestBody/ReadBeforeIdemkit", config: Config[C]{StreamRequestBody: true}, early: true},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			e, _ := newEngine(t, func(c *idem.Config) { c.MaxRequestBody = limit })
			app := s.a.NewApp(cfg.config)
			if cfg.early {
				app.Use(func(c C) error {
					var probe map[string]any
					if err := s.a.Bind(c, &probe); err != nil {
						return s.a.NewError(http.StatusBadRequest, err.Error())
					}
					return c.Next()
				})
			}
			app.Use(s.a.New(e))
			var calls atomic.Int64
			app.Post("/charges", func(c C) error {
				calls.Add(1)
				var in struct {
					Amount   int    `json:"amount"`
					Currency string `json:"currency"`
				}
				if err := s.a.Bind(c, &in); err != nil {
					return s.a.NewError(http.StatusBadRequest, err.Error())
				}
				return status(c, 201).JSON(map[string]any{"amount": in.Amount, "currency": in.Currency, "raw": len(c.Body())})
			})
			body := `{"amount":1999,"currency":"usd"}`
			first := do(t, app, "POST", "/charges", "k1", body)
			if want := fmt.Sprintf(`{"amount":1999,"currency":"usd","raw":%d}`, len(body)); first.status != 201 || first.body != want {
				t.Fatalf("handler saw %d %s, want 201 %s", first.status, first.body, want)
			}
			wantReplay(t, first, do(t, app, "POST", "/charges", "k1", "{ \"currency\": \"usd\", \"amount\": 1999 }"))

			big := `{"amount":1,"pad":"` + strings.Repeat("x", limit) + `"}`
			r := do(t, app, "POST", "/charges", "k2", big)
			if r.status != 413 || r.header.Get("Content-Type") != exchange.ProblemContentType {
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

// multipartForm: fasthttp parses multipart forms while reading the
// request unless told not to; a byte-identical retry must still be a replay.
func (s *suite[C, O]) multipartForm(t *testing.T) {
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
		config Config[C]
	}{
		{"PreParsed", Config[C]{}},
		{"PreParsed/StreamRequestBody", Config[C]{StreamRequestBody: true}},
		{"Raw", Config[C]{DisablePreParseMultipartForm: true}},
		{"Raw/StreamRequestBody", Config[C]{DisablePreParseMultipartForm: true, StreamRequestBody: true}},
	} {
		t.Run(cfg.name, func(t *testing.T) {
			e, _ := newEngine(t, func(c *idem.Config) { c.MaxRequestBody = limit })
			app := s.a.NewApp(cfg.config)
			app.Use(s.a.New(e))
			var calls atomic.Int64
			app.Post("/files", func(c C) error {
				n := calls.Add(1)
				fh, err := c.FormFile("file")
				if err != nil {
					return s.a.NewError(http.StatusBadRequest, err.Error())
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
				return status(c, 201).SendString(fmt.Sprintf("call %d: %s %s %q", n, c.FormValue("purpose"), c.FormValue("field7"), content))
			})
			post := func(key string, ctype string, body []byte) reply {
				t.Helper()
				return send(t, app, http.MethodPost, "/files", key, ctype, bytes.NewReader(body))
			}
			ctype, body := form("total: 19.99")
			first := post("k1", ctype, body)
			if want := `call 1: dispute_evidence 7 "total: 19.99"`; first.status != 201 || first.body != want {
				t.Fatalf("first: %d %q, want 201 %q", first.status, first.body, want)
			}
			for range 3 {
				wantReplay(t, first, post("k1", ctype, body))
			}
			otherType, other := form("total: 29.99")
			if r := post("k1", otherType, other); r.status != 422 {
				t.Fatalf("same key, another file: %d %q, want 422", r.status, r.body)
			}
			bigType, big := form(strings.Repeat("x", limit))
			if r := post("k2", bigType, big); r.status != 413 {
				t.Fatalf("form over the limit: %d %q, want 413", r.status, r.body)
			}
			if calls.Load() != 1 {
				t.Fatalf("handler ran %d times, want 1", calls.Load())
			}
		})
	}
}

// buffersReused serves every request on one fasthttp.RequestCtx, as a
// keep-alive connection does, so each request is parsed into the buffers of
// the one before. The scope function returns c.Get's aliasing string on
// purpose: the middleware must copy it.
func (s *suite[C, O]) buffersReused(t *testing.T) {
	mem := memstore.New(memstore.WithPurgeInterval(0))
	defer mem.Close()
	store := &recordingStore{Store: mem}
	e := idem.New(idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler), ReplayHeaders: []string{"X-Charge"}})
	app := s.a.NewApp(Config[C]{})
	app.Use(s.a.New(e, s.a.WithScope(func(c C) string { return c.Get("X-Tenant") })))
	var calls int
	app.Post("/charges/:id", func(c C) error {
		calls++
		c.Set("Location", "/charges/"+c.Params("id"))
		c.Set("X-Charge", c.Params("id")+" "+c.Get("X-Tenant"))
		c.Set("Content-Type", c.Get("Content-Type"))
		return status(c, 201).Send(c.Body()) // the response body aliases the request's
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

// requestRewritten checks that the method and path idemkit reports are
// the request's as received, even when a later handler rewrites the request
// in place, and that an absolute-form target maps to its path and query.
func (s *suite[C, O]) requestRewritten(t *testing.T) {
	var mu sync.Mutex
	var stored []string
	e, _ := newEngine(t, func(c *idem.Config) {
		c.OnEvent = func(_ context.Context, ev idemevent.Event) {
			if ev.Kind == idemevent.Stored || ev.Kind == idemevent.Replay {
				mu.Lock()
				defer mu.Unlock()
				stored = append(stored, ev.Kind.String()+" "+ev.Method+" "+ev.Route)
			}
		}
	})
	app := s.a.NewApp(Config[C]{})
	app.Use(s.a.New(e))
	app.Post("/charges/:id", func(c C) error {
		// Same-length rewrites land in the buffers the request was read into.
		c.Request().Header.SetMethod("PUT")
		c.Request().SetRequestURI("/xxxxxxx/xxxx?y=2")
		return status(c, 201).SendString("created")
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
