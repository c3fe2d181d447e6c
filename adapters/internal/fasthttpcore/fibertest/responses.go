package fibertest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemtest"
)

func (s *suite[C, O]) streamedNotStored(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name   string
		stream func(c C, n int64) error
	}{
		{name: "BodyStreamWriter", stream: func(c C, n int64) error {
			s.a.RequestCtx(c).SetBodyStreamWriter(func(w *bufio.Writer) {
				fmt.Fprintf(w, "part 1 of call %d\n", n)
				_ = w.Flush()
				fmt.Fprintf(w, "part 2 of call %d\n", n)
			})
			return nil
		}},
		{name: "SendStream", stream: func(c C, n int64) error {
			return c.SendStream(strings.NewReader(fmt.Sprintf("part 1 of call %d\npart 2 of call %d\n", n, n)))
		}},
		{name: "SendFile", stream: func(c C, n int64) error {
			name := filepath.Join(dir, fmt.Sprintf("call-%d.txt", n))
			if err := os.WriteFile(name, fmt.Appendf(nil, "part 1 of call %d\npart 2 of call %d\n", n, n), 0o600); err != nil {
				return err
			}
			return s.a.SendFile(c, name)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e, ev := newEngine(t, nil)
			app := s.a.NewApp(Config[C]{})
			app.Use(s.a.New(e))
			var calls atomic.Int64
			app.Post("/events", func(ctx C) error {
				ctx.Set("Content-Type", "text/plain")
				return c.stream(ctx, calls.Add(1))
			})
			for n := 1; n <= 2; n++ {
				r := do(t, app, "POST", "/events", "k1", `{}`)
				want := fmt.Sprintf("part 1 of call %d\npart 2 of call %d\n", n, n)
				if r.status != 200 || r.replayed() || r.body != want {
					t.Fatalf("call %d: %d replayed=%v %q, want 200 %q", n, r.status, r.replayed(), r.body, want)
				}
			}
			ev.wantStreamed(t, 2)
		})
	}
}

// hijackedNotStored: a handler that takes the connection over (as a
// WebSocket upgrade does) writes past fasthttp, so nothing can be stored.
func (s *suite[C, O]) hijackedNotStored(t *testing.T) {
	e, ev := newEngine(t, nil)
	app := s.a.NewApp(Config[C]{})
	app.Use(s.a.New(e))
	var calls atomic.Int64
	app.Post("/upgrade", func(c C) error {
		n := calls.Add(1)
		s.a.RequestCtx(c).HijackSetNoResponse(true)
		s.a.RequestCtx(c).Hijack(func(conn net.Conn) {
			body := fmt.Sprintf("raw call %d", n)
			fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		})
		return nil
	})
	url := Listen(t, app)
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
	ev.wantStreamed(t, 2)
}

func (s *suite[C, O]) panicReleasesKey(t *testing.T) {
	e, ev := newEngine(t, nil)
	app := s.a.NewApp(Config[C]{})
	app.Use(s.a.Recover())
	app.Use(s.a.New(e))
	var calls atomic.Int64
	var panicking atomic.Bool
	panicking.Store(true)
	app.Post("/charges", func(c C) error {
		n := calls.Add(1)
		if panicking.Load() {
			panic("charge failed half-way")
		}
		return status(c, 201).SendString("charged by call " + strconv.FormatInt(n, 10))
	})
	if r := do(t, app, "POST", "/charges", "k1", `{}`); r.status != 500 {
		t.Fatalf("panicking handler: %d %q, want 500", r.status, r.body)
	}
	if got := ev.notStored(); len(got) != 1 || got[0] != exchange.ReasonPanic {
		t.Fatalf("not-stored reasons %v, want [%s]", got, exchange.ReasonPanic)
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

// replayContentType: fasthttp types a body the handler left untyped
// (text/plain; charset=utf-8) and sends no Content-Type with a response
// that has no body. A replay carries the Content-Type the client received,
// and none when it received none. Responses are read off a real connection
// by net/http's client, which adds no header: the ones checked are the ones
// on the wire.
func (s *suite[C, O]) replayContentType(t *testing.T) {
	const text = "text/plain; charset=utf-8"
	cases := []struct {
		name    string
		handler func(C) error
		status  int
		ctype   []string // on the wire, first response and replay alike
	}{
		// SendStatus sets the body "No Content", which a 204 never sends.
		{name: "204/SendStatus", handler: func(c C) error { return c.SendStatus(http.StatusNoContent) }, status: 204},
		{name: "204/StatusOnly", handler: func(c C) error { status(c, http.StatusNoContent); return nil }, status: 204},
		{name: "200/NoBody", handler: func(c C) error { status(c, http.StatusOK); return nil }, status: 200},
		{name: "201/UntypedBody", handler: func(c C) error { return status(c, http.StatusCreated).SendString("created") },
			status: 201, ctype: []string{text}},
		// Set explicitly, the default type goes on the wire even without a body.
		{name: "204/TypedExplicitly", handler: func(c C) error {
			c.Set("Content-Type", text)
			return c.SendStatus(http.StatusNoContent)
		}, status: 204, ctype: []string{text}},
		{name: "200/JSON", handler: func(c C) error { return c.JSON(map[string]any{"ok": true}) },
			status: 200, ctype: []string{s.a.JSONType}},
	}
	e, _ := newEngine(t, nil)
	app := s.a.NewApp(Config[C]{})
	app.Use(s.a.New(e))
	for _, c := range cases {
		app.Post("/"+strings.ReplaceAll(c.name, "/", "-"), c.handler)
	}
	base := Listen(t, app)
	send := func(t *testing.T, path string) idemtest.Response {
		t.Helper()
		return idemtest.Post(t, base+path, `"`+path+`"`, `{}`) // a key per route
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := "/" + strings.ReplaceAll(c.name, "/", "-")
			first := send(t, path)
			if first.Status != c.status || !slices.Equal(first.Header.Values("Content-Type"), c.ctype) {
				t.Fatalf("first response %d with Content-Type %q, want %d with %q", first.Status, first.Header.Values("Content-Type"), c.status, c.ctype)
			}
			replay := send(t, path)
			if !replay.Replayed() || replay.Status != c.status || replay.Body != first.Body {
				t.Fatalf("second response %d %q (replayed %v), want a replay of %d %q", replay.Status, replay.Body,
					replay.Replayed(), c.status, first.Body)
			}
			if got := replay.Header.Values("Content-Type"); !slices.Equal(got, c.ctype) {
				t.Fatalf("replayed Content-Type %q, want %q as the first response had", got, c.ctype)
			}
		})
	}
}

// bodyLimitProblem: a body over Fiber's own limit (BodyLimit, 4 MiB by
// default), which fasthttp refuses before any middleware runs, is answered
// with the payload-too-large problem idemkit answers for a body over its
// own limit, once the app uses the adapter's ErrorHandler. Other errors
// keep their usual handler. Requests go over a real connection as raw
// bytes: fasthttp refuses the body without reading it to the end, and
// closes the connection, so each request sends only what fasthttp reads.
func (s *suite[C, O]) bodyLimitProblem(t *testing.T) {
	e, _ := newEngine(t, nil) // MaxRequestBody: idemkit's default, 1 MiB
	app := s.a.NewApp(Config[C]{ErrorHandler: s.a.ErrorHandler(e, nil)})
	app.Use(s.a.New(e))
	var calls atomic.Int64
	app.Post("/charges", func(c C) error {
		calls.Add(1)
		return status(c, http.StatusCreated).SendString("created")
	})
	app.Post("/refuses", func(c C) error {
		return s.a.NewError(http.StatusRequestEntityTooLarge, "the handler's own 413")
	})
	addr := strings.TrimPrefix(Listen(t, app), "http://")

	fiberLimit := e.Adapter().BodyTooLarge(int64(s.a.DefaultBodyLimit))
	t.Run("ContentLength", func(t *testing.T) {
		// A 5 MiB body announced by its length is refused on the header alone.
		resp := rawRequest(t, addr, func(w io.Writer) {
			fmt.Fprintf(w, "POST /charges HTTP/1.1\r\nHost: api.test\r\nIdempotency-Key: \"k1\"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 5<<20)
		})
		wantProblemResponse(t, resp, fiberLimit)
	})
	t.Run("Chunked", func(t *testing.T) {
		// Four 1 MiB chunks are read; the fifth crosses the limit.
		resp := rawRequest(t, addr, func(w io.Writer) {
			fmt.Fprint(w, "POST /charges HTTP/1.1\r\nHost: api.test\r\nIdempotency-Key: \"k2\"\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
			chunk := bytes.Repeat([]byte("x"), 1<<20)
			for range 4 {
				fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk)
			}
			fmt.Fprintf(w, "%x\r\n", len(chunk))
		})
		wantProblemResponse(t, resp, fiberLimit)
	})
	t.Run("IdemkitLimit", func(t *testing.T) {
		// Under Fiber's limit but over idemkit's: the same problem, from Begin.
		body := strings.Repeat("x", 2<<20)
		resp := rawRequest(t, addr, func(w io.Writer) {
			fmt.Fprintf(w, "POST /charges HTTP/1.1\r\nHost: api.test\r\nIdempotency-Key: \"k3\"\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		})
		wantProblemResponse(t, resp, e.Adapter().BodyTooLarge(e.Config().MaxRequestBody))
	})
	if n := calls.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for bodies over a limit", n)
	}
	t.Run("OtherErrors", func(t *testing.T) {
		for _, c := range []struct{ target, body string }{
			{"/nowhere", s.a.NotFound(http.MethodPost, "/nowhere")},
			{"/refuses", "the handler's own 413"},
		} {
			resp := rawRequest(t, addr, func(w io.Writer) {
				fmt.Fprintf(w, "POST %s HTTP/1.1\r\nHost: api.test\r\nIdempotency-Key: \"k4\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", c.target)
			})
			if ct := resp.header.Get("Content-Type"); ct != "text/plain; charset=utf-8" || resp.body != c.body {
				t.Fatalf("%s: %d %s %q, want Fiber's default error handler's %q", c.target, resp.status, ct, resp.body, c.body)
			}
		}
	})
}
