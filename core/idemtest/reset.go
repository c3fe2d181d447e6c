package idemtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
)

// Clients that go away while a response is being written: over HTTP/1.1
// (a TCP reset, Delivery/ClientResetMidBody) and HTTP/2 (a stream reset,
// TestHTTP2StreamReset). /big?pause=1 holds its response after the first
// part until the case has reset the connection, and reports what it saw
// (bigOutcome).

// resetDuringResponse sends a request on a connection of its own and
// resets that connection (TCP RST) once the handler has written the first
// part of its response, then lets the handler write the rest. The handler
// itself waits for the server to notice the reset before it writes on.
func resetDuringResponse(t *testing.T, e *env, key, path string) {
	t.Helper()
	u, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nIdempotency-Key: %s\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", path, u.Host, key)
	recv(t, e.app.midBody, "the handler's first part")
	conn.(*net.TCPConn).SetLinger(0) // Close sends RST
	conn.Close()
	e.app.resume <- struct{}{}
}

// wantResetMidResponse checks that the reset reached the server while the
// handler was writing its response, and made a write of it fail (see
// bigOutcome). netHTTP says the server must be net/http's.
func wantResetMidResponse(t *testing.T, out bigOutcome, netHTTP bool) {
	t.Helper()
	switch {
	case !out.netHTTP && netHTTP:
		t.Fatal("the handler's writers do not lead to net/http's: nothing tells whether the reset met the response")
	case !out.netHTTP:
		t.Log("not served by net/http: the reset met the response if the server sends it as the handler writes, which the suite cannot see")
	case !out.clientGone:
		t.Fatal("the server never reported the client gone while the handler held its response")
	case out.writeErr == nil:
		t.Fatal("no write of the response failed after the reset: the reset did not meet the response")
	default:
		t.Logf("after the reset, the server's writer failed: %v", out.writeErr)
	}
}

// wantWholeReplay checks that r replays the body /big wrote for the first
// call, whole, size bytes.
func wantWholeReplay(t *testing.T, r *result, size int) {
	t.Helper()
	if !r.replayed() {
		t.Fatalf("retry got %d, not a replay: the whole response the handler wrote was not stored", r.status)
	}
	if want := bigBody(1, size); !bytes.Equal(r.body, want) {
		t.Fatalf("replayed body has %d bytes, want the handler's %d, whole", len(r.body), len(want))
	}
}

// settled sends c until its key is no longer in flight (409), for a case
// whose first request ended on the server after its client left.
func (e *env) settled(t *testing.T, c call) *result {
	t.Helper()
	return untilSettled(t, func() *result { return e.send(c) })
}

// untilSettled calls send until its answer is not 409, for at most ten
// seconds, and returns the last answer.
func untilSettled(t *testing.T, send func() *result) *result {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := send()
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.status != 409 || time.Now().After(deadline) {
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHTTP2StreamReset checks that an adapter built on net/http stores a
// response whole, or not at all, when an HTTP/2 client resets its stream
// part way through the body. wrap mounts h behind the adapter's middleware
// for e, as TestMiddleware's Mount does, but returns the handler so that
// the test serves it over TLS with HTTP/2.
func TestHTTP2StreamReset(t *testing.T, wrap func(e *idem.Engine, h http.Handler) http.Handler) {
	t.Helper()
	a := newApp()
	const size = 900 << 10
	c := serveHTTP2(t, wrap, a, fmt.Sprintf("/big?size=%d&pause=1", size))
	resetStream(t, a, c)
	wantResetMidResponse(t, recv(t, a.bigDone, "the handler's last part"), true)
	wantWholeReplay(t, untilSettled(t, func() *result { return c.send(context.Background()) }), size)
}

// h2Client posts to one path of a server over HTTP/2, with one key.
type h2Client struct {
	client *http.Client
	url    string
}

// serveHTTP2 serves a behind wrap's middleware over TLS with HTTP/2 until
// the test ends, and returns a client of path on it.
func serveHTTP2(t *testing.T, wrap func(e *idem.Engine, h http.Handler) http.Handler, a *app, path string) h2Client {
	t.Helper()
	e := idem.New(idem.Config{Store: memstore.New(memstore.WithPurgeInterval(0)), MaxResponseBody: 2 << 20,
		Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewUnstartedServer(wrap(e, a))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	t.Cleanup(a.releaseSlow) // before the server waits for its handlers
	client := srv.Client()
	client.Timeout = 10 * time.Second // a broken build fails here, with a message
	return h2Client{client: client, url: srv.URL + path}
}

// post sends the request and returns the response, its body unread.
func (c h2Client) post(ctx context.Context) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(`{}`))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Idempotency-Key", `"h2-reset"`)
	req.Header.Set("Content-Type", "application/json")
	return c.client.Do(req)
}

// send sends the request and reads the whole response.
func (c h2Client) send(ctx context.Context) *result {
	resp, err := c.post(ctx)
	if err != nil {
		return &result{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return &result{status: resp.StatusCode, header: resp.Header, body: body, err: err}
}

// resetStream sends the request, reads part of the first part of the
// response, and resets the stream (RST_STREAM) while the handler holds the
// rest; then lets the handler write on.
func resetStream(t *testing.T, a *app, c h2Client) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := c.post(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("served over %s, want HTTP/2", resp.Proto)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 48<<10)); err != nil {
		t.Fatal(err)
	}
	recv(t, a.midBody, "the handler's first part")
	cancel() // RST_STREAM
	resp.Body.Close()
	a.resume <- struct{}{}
}
