package idemfiber_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"

	idemfiber "github.com/idemkit/idemkit/adapters/fiberv3"
	idem "github.com/idemkit/idemkit/core"
)

// TestBodyLimitProblem: a body over Fiber's own limit (BodyLimit, 4 MiB by
// default), which fasthttp refuses before any middleware runs, is answered
// with the payload-too-large problem idemkit answers for a body over its
// own limit, once the app uses ErrorHandler. Other errors keep their usual
// handler. Requests go over a real connection as raw bytes: fasthttp
// refuses the body without reading it to the end, and closes the
// connection, so each request sends only what fasthttp reads.
func TestBodyLimitProblem(t *testing.T) {
	e, _ := newEngine(t, nil) // MaxRequestBody: idemkit's default, 1 MiB
	app := fiber.New(fiber.Config{ErrorHandler: idemfiber.ErrorHandler(e, nil)})
	app.Use(idemfiber.New(e))
	var calls atomic.Int64
	app.Post("/charges", func(c fiber.Ctx) error {
		calls.Add(1)
		return c.Status(fiber.StatusCreated).SendString("created")
	})
	app.Post("/refuses", func(c fiber.Ctx) error {
		return fiber.NewError(fiber.StatusRequestEntityTooLarge, "the handler's own 413")
	})
	addr := strings.TrimPrefix(listen(t, app), "http://")

	fiberLimit := e.BodyTooLarge(fiber.DefaultBodyLimit)
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
		wantProblemResponse(t, resp, e.BodyTooLarge(e.Config().MaxRequestBody))
	})
	if n := calls.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for bodies over a limit", n)
	}
	t.Run("OtherErrors", func(t *testing.T) {
		for _, c := range []struct{ target, body string }{
			{"/nowhere", "Not Found"},
			{"/refuses", "the handler's own 413"},
		} {
			resp := rawRequest(t, addr, func(w io.Writer) {
				fmt.Fprintf(w, "POST %s HTTP/1.1\r\nHost: api.test\r\nIdempotency-Key: \"k4\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", c.target)
			})
			if ct := resp.header.Get("Content-Type"); ct != fiber.MIMETextPlainCharsetUTF8 || resp.body != c.body {
				t.Fatalf("%s: %d %s %q, want Fiber's default error handler's %q", c.target, resp.status, ct, resp.body, c.body)
			}
		}
	})
}

// rawRequest writes a request with write on a new connection to addr and
// reads the response off it.
func rawRequest(t *testing.T, addr string, write func(io.Writer)) reply {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second)) // a hung server fails the test, not the run
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		bw := bufio.NewWriter(conn)
		write(bw)
		_ = bw.Flush()
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	<-wrote
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// wantProblemResponse checks that r is want, as sent on the wire.
func wantProblemResponse(t *testing.T, r reply, want idem.Response) {
	t.Helper()
	if r.status != want.Status || r.body != string(want.Body) {
		t.Fatalf("got %d %q, want %d %q", r.status, r.body, want.Status, want.Body)
	}
	for _, f := range want.Header {
		if got := r.header.Values(f.Name); strings.Join(got, "\n") != strings.Join(f.Values, "\n") {
			t.Fatalf("%s: %q, want %q", f.Name, got, f.Values)
		}
	}
	if r.replayed() {
		t.Fatal("a problem is never a replay")
	}
}
