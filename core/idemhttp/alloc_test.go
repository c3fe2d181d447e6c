//go:build !race

// Allocation counts are checked only without the race detector, which makes
// sync.Pool drop items at random; scripts/test-all runs this pass too.

package idemhttp_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
)

// TestReplayAllocs bounds what a replay on the memory store allocates
// beyond the request itself: the body Begin reads, the owner token of the
// Acquire and the header values written (the Content-Type the handler
// set and Idempotent-Replayed). The stored header, made of common strings,
// is shared between replays, not unpacked anew for each (it cost two
// allocations more).
func TestReplayAllocs(t *testing.T) {
	store := memstore.New(memstore.WithPurgeInterval(0))
	defer store.Close()
	e := idem.New(idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	h := idemhttp.Middleware(e)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ord_1","amount":1999}`))
	}))
	payload := []byte(`{"item":"paperback","quantity":3,"customer":"cus_8f14"}`)
	body := new(reusableBody)
	r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/orders"}, RequestURI: "/orders",
		Header: http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {"replayed-key"}},
		Body:   body, ContentLength: int64(len(payload))}
	w := &sink{header: http.Header{}}
	serve := func() {
		body.Reset(payload)
		r.Body = body // the first request's handler read the middleware's
		clear(w.header)
		w.status = 0
		h.ServeHTTP(w, r)
	}
	serve() // the first request, recorded
	if w.status != http.StatusCreated || w.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first request: %d, replayed %q", w.status, w.header.Get("Idempotent-Replayed"))
	}
	allocs := testing.AllocsPerRun(200, serve)
	if w.status != http.StatusCreated || w.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("not a replay: %d, replayed %q", w.status, w.header.Get("Idempotent-Replayed"))
	}
	if allocs > 3 {
		t.Errorf("a replay allocates %v times, want at most 3", allocs)
	}
}

type reusableBody struct{ bytes.Reader }

func (*reusableBody) Close() error { return nil }

// sink is a ResponseWriter that keeps the status and drops the body.
type sink struct {
	header http.Header
	status int
}

func (w *sink) Header() http.Header { return w.header }

func (w *sink) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *sink) Write(p []byte) (int, error) { return len(p), nil }
