package flaky

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestPlanOrder: the attempts of one payment meet held, untouched,
// dropped, then untouched for good; each payment (account and key) counts
// its own.
func TestPlanOrder(t *testing.T) {
	n := New(quiet())
	plan := func(auth, key string) Fault {
		return n.Plan(http.MethodPost, "/v1/charges", "flaky", auth, key)
	}
	want := []Fault{Held, None, Dropped, None, None, None}
	for i, w := range want {
		if got := plan("Bearer a", `"k1"`); got != w {
			t.Fatalf("attempt %d: %v, want %v", i+1, got, w)
		}
	}
	if got := plan("Bearer b", `"k1"`); got != Held {
		t.Fatalf("another account's first attempt with the same key: %v, want held", got)
	}
	if got := plan("Bearer a", `"k2"`); got != Held {
		t.Fatalf("another key's first attempt: %v, want held", got)
	}
}

// TestPlanOnlyWhenAsked: requests without the header, or that are not a
// keyed POST under /v1, are never faulted nor counted.
func TestPlanOnlyWhenAsked(t *testing.T) {
	n := New(quiet())
	for _, c := range []struct{ method, path, header, key string }{
		{http.MethodPost, "/v1/charges", "", `"k"`},
		{http.MethodPost, "/v1/charges", "slow", `"k"`},
		{http.MethodGet, "/v1/balance", "flaky", `"k"`},
		{http.MethodPost, "/v1/charges", "flaky", ""},
		{http.MethodPost, "/docs/idempotency", "flaky", `"k"`},
	} {
		if f := n.Plan(c.method, c.path, c.header, "Bearer a", c.key); f != None {
			t.Errorf("%+v: %v, want none", c, f)
		}
	}
	if f := n.Plan(http.MethodPost, "/v1/charges", " Flaky ", "Bearer a", `"k"`); f != Held {
		t.Fatalf("after the requests that did not ask: %v, want the first attempt held", f)
	}
}

// TestPlanForgets: counts are kept ten minutes, and for a bounded number
// of payments.
func TestPlanForgets(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n := New(quiet())
	n.now = func() time.Time { return now }
	n.Plan(http.MethodPost, "/v1/charges", "flaky", "Bearer a", `"k"`)
	now = now.Add(forgetAfter)
	if f := n.Plan(http.MethodPost, "/v1/charges", "flaky", "Bearer a", `"k"`); f != Held {
		t.Fatalf("after %v: %v, want the payment forgotten (held again)", forgetAfter, f)
	}
	for i := range maxPayments + 10 {
		n.Plan(http.MethodPost, "/v1/charges", "flaky", "Bearer a", string(rune('a'+i%26))+strings.Repeat("x", i/26))
	}
	if len(n.seen) > maxPayments || len(n.arrival) != len(n.seen) {
		t.Fatalf("%d payments kept (%d in order), want at most %d", len(n.seen), len(n.arrival), maxPayments)
	}
}

// TestMiddleware: a held request waits, and runs on after its client has
// gone; a dropped one runs, and its client gets no answer; the others
// pass.
func TestMiddleware(t *testing.T) {
	n := New(quiet())
	n.hold = 300 * time.Millisecond
	var ran atomic.Int32
	finished := make(chan struct{}, 4)
	srv := httptest.NewServer(n.Middleware(n.HoldHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran.Add(1)
		if r.Context().Err() != nil {
			t.Errorf("the handler's context ended with its client: %v", r.Context().Err())
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		w.Write([]byte(`{"id":"ch_1"}`))
		finished <- struct{}{}
	}))))
	defer srv.Close()
	send := func(timeout time.Duration) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/charges", strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer a")
		req.Header.Set("Idempotency-Key", `"k"`)
		req.Header.Set(Header, Value)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, err = io.ReadAll(resp.Body)
		return resp.StatusCode, err
	}
	// Attempt 1: held past the client's patience, and still run.
	if _, err := send(50 * time.Millisecond); err == nil {
		t.Fatal("attempt 1 answered before the hold ended")
	}
	<-finished
	// Attempt 2: untouched.
	if status, err := send(10 * time.Second); err != nil || status != 201 {
		t.Fatalf("attempt 2: %d %v", status, err)
	}
	<-finished
	// Attempt 3: run, answer broken off.
	if status, err := send(10 * time.Second); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("attempt 3: %d %v, want its body broken off", status, err)
	}
	<-finished
	if status, err := send(10 * time.Second); err != nil || status != 201 {
		t.Fatalf("attempt 4: %d %v", status, err)
	}
	if got := ran.Load(); got != 4 {
		t.Fatalf("the handler ran %d times, want 4", got)
	}
}
