package idemclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idemkit/core/idemclient"
)

// TestWaitPastDeadlineReturnsLastAnswer: a wait that would end after the
// context's deadline is not started; the caller gets the answer the client
// has (the server's 503, 429 or 409, body unread) instead of a context error.
func TestWaitPastDeadlineReturnsLastAnswer(t *testing.T) {
	reset := &netError{syscall.ECONNRESET}
	tests := []struct {
		name       string
		steps      []step
		wantStatus int   // the answer handed back, 0 for an error
		wantErr    error // with wantStatus 0: what the error must match
	}{
		{"Retry-After on 503", []step{{status: 503, retryAfter: "120"}, {status: 201}}, 503, nil},
		{"Retry-After on 429", []step{{status: 429, retryAfter: "120"}, {status: 201}}, 429, nil},
		{"Retry-After on 409", []step{{status: 409, retryAfter: "120"}, {status: 201}}, 409, nil},
		{"backoff after 503", []step{{status: 503}, {status: 201}}, 503, nil},
		{"backoff after a network error", []step{{err: reset}, {status: 201}}, 0, syscall.ECONNRESET},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &scriptedRT{steps: tt.steps}
			clk := newFakeClock()
			cfg := testConfig(rt, clk)
			// Neither the budget nor MaxBackoff stops these waits: only the deadline does.
			cfg.Budget, cfg.MaxBackoff, cfg.BaseBackoff = -1, time.Hour, 10*time.Minute
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := idemclient.New(cfg).RoundTrip(newRequest(t, http.MethodPost, "{}").WithContext(ctx))
			if got := clk.Slept(); len(got) != 0 {
				t.Errorf("waits %v, want none: each would end after the deadline", got)
			}
			if n := len(rt.Sent()); n != 1 {
				t.Errorf("%d attempts, want 1", n)
			}
			if tt.wantStatus == 0 {
				var e *idemclient.Error
				if !errors.As(err, &e) || !errors.Is(err, tt.wantErr) || errors.Is(err, context.DeadlineExceeded) || e.Attempts != 1 {
					t.Errorf("error %v, want the attempt's own error (%v) after 1 attempt", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("error %v, want the %d answer", err, tt.wantStatus)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != tt.wantStatus || !strings.HasSuffix(string(b), http.StatusText(tt.wantStatus)) {
				t.Errorf("status %d, body %q (%v); want the %d answer with its body", resp.StatusCode, b, err, tt.wantStatus)
			}
			if out, ok := idemclient.Outcome(resp); !ok || out.Attempts != 1 {
				t.Errorf("Outcome = %+v, %v; want 1 attempt", out, ok)
			}
		})
	}
	t.Run("a wait that fits before the deadline is taken", func(t *testing.T) {
		rt := &scriptedRT{steps: []step{{status: 503, retryAfter: "1"}, {status: 201}}}
		clk := newFakeClock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := idemclient.New(testConfig(rt, clk)).RoundTrip(newRequest(t, http.MethodPost, "{}").WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 || !slices.Equal(clk.Slept(), []time.Duration{time.Second}) {
			t.Errorf("status %d after waits %v, want 201 after [1s]", resp.StatusCode, clk.Slept())
		}
	})
}
