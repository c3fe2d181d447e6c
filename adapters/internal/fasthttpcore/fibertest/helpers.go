package fibertest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/memstore"
)

// events records what the engine reports.
type events struct {
	mu   sync.Mutex
	list []idemevent.Event
}

func (ev *events) add(_ context.Context, e idemevent.Event) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.list = append(ev.list, e)
}

// notStored returns the reasons of the EventNotStored events so far.
func (ev *events) notStored() []exchange.Reason {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	var out []exchange.Reason
	for _, e := range ev.list {
		if e.Kind == idemevent.NotStored {
			out = append(out, e.Reason)
		}
	}
	return out
}

// wantStreamed fails t unless the engine reported n responses not
// stored, each for being streamed.
func (ev *events) wantStreamed(t *testing.T, n int) {
	t.Helper()
	got := ev.notStored()
	ok := len(got) == n
	for _, r := range got {
		ok = ok && r == exchange.ReasonStreamed
	}
	if !ok {
		t.Fatalf("not-stored reasons %v, want %d times %q", got, n, exchange.ReasonStreamed)
	}
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

func (r reply) replayed() bool { return r.header.Get(exchange.ReplayedHeader) == "true" }

// do sends one request with a JSON body through app.Test; key "" sends no
// key.
func do[C Ctx](t *testing.T, app App[C], method, target, key, body string) reply {
	t.Helper()
	return send(t, app, method, target, key, "application/json", strings.NewReader(body))
}

// send sends one request through app.Test; key "" sends no key.
func send[C Ctx](t *testing.T, app App[C], method, target, key, ctype string, body io.Reader) reply {
	t.Helper()
	req := httptest.NewRequest(method, target, body)
	req.Header.Set("Content-Type", ctype)
	if key != "" {
		req.Header.Set(idem.DefaultHeaderName, key)
	}
	resp, err := app.Test(req)
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
func wantProblemResponse(t *testing.T, r reply, want exchange.Response) {
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

// counter is a handler that counts its calls and answers 201 with the count.
type counter struct{ n atomic.Int64 }

func handle[C Ctx](h *counter) func(C) error {
	return func(c C) error {
		n := h.n.Add(1)
		return status(c, http.StatusCreated).JSON(map[string]any{"call": n, "path": c.Path()})
	}
}
