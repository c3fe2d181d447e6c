package idemtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/memstore"
)

// SkipHeader is the request header whose value "1" the adapter's skip option
// must answer true for, reading it the way the framework's users would.
const SkipHeader = "X-Skip-Idempotency"

// SkipMount serves h behind the adapter's middleware for e, with its skip
// option answering true for requests whose SkipHeader is "1", and returns
// the server's base URL. It registers the server's shutdown with
// tb.Cleanup. h is a plain http.Handler: wrap it the way the framework's
// users would.
type SkipMount func(tb testing.TB, e *idem.Engine, h http.Handler) (baseURL string)

// skipMaxBody is the engine's MaxRequestBody: a skipped request's longer body
// reaches the handler whole, as idemkit never reads it.
const skipMaxBody = 64

// TestSkip checks an adapter's skip option (idemhttp.WithSkip,
// idemgin.WithSkip, idemecho.WithSkipper, idemfiber.WithNext, ...): a
// request the option skips passes through untouched, and nothing about it
// is recorded. Every adapter runs it, as it runs TestMiddleware.
func TestSkip(t *testing.T, mount SkipMount) {
	t.Helper()
	store := memstore.New(memstore.WithPurgeInterval(0))
	t.Cleanup(func() { store.Close() })
	var events atomic.Int64
	e := idem.New(idem.Config{Store: store, MaxRequestBody: skipMaxBody, Logger: slog.New(slog.DiscardHandler),
		OnEvent: func(context.Context, idemevent.Event) { events.Add(1) }})
	var calls atomic.Int64
	url := mount(t, e, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "call %d: %s", n, body)
	}))
	send := func(skip bool, key, body string) (status int, replayed bool, got string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url+"/charges", strings.NewReader(body))
		req.Header.Set("Content-Type", "text/plain")
		if key != "" {
			req.Header.Set(idem.DefaultHeaderName, key)
		}
		if skip {
			req.Header.Set(SkipHeader, "1")
		}
		resp, err := suiteClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header.Get(exchange.ReplayedHeader) != "", string(b)
	}

	long := strings.Repeat("x", 2*skipMaxBody)
	for i, c := range []struct{ key, body string }{{"", "no key"}, {`"k1"`, "same"}, {`"k1"`, "same"}, {`"k1"`, long}} {
		status, replayed, got := send(true, c.key, c.body)
		if want := fmt.Sprintf("call %d: %s", i+1, c.body); status != http.StatusCreated || replayed || got != want {
			t.Fatalf("skipped request %d (key %q): %d replayed=%v %q, want the handler's 201 %q", i+1, c.key, status, replayed, got, want)
		}
	}
	if n, ev := store.Len(), events.Load(); n != 0 || ev != 0 {
		t.Fatalf("after skipped requests the store holds %d records and the engine reported %d events, want none", n, ev)
	}
	// The key the skipped requests carried is still unused.
	status, replayed, got := send(false, `"k1"`, "same")
	if status != http.StatusCreated || replayed || got != "call 5: same" {
		t.Fatalf("guarded request with the key skipped ones carried: %d replayed=%v %q, want a first run", status, replayed, got)
	}
	if status, replayed, got := send(false, `"k1"`, "same"); status != http.StatusCreated || !replayed || got != "call 5: same" {
		t.Fatalf("guarded retry: %d replayed=%v %q, want the replay of call 5", status, replayed, got)
	}
	if status, _, _ := send(false, "", "no key"); status != http.StatusBadRequest {
		t.Fatalf("guarded request without a key: %d, want 400", status)
	}
}
