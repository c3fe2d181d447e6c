package idemclient_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idemkit/core/idemclient"
)

// TestRetryAfterAlwaysCapped: whatever the budget, a Retry-After longer than
// MaxBackoff is not waited out; the answer is handed back at once.
func TestRetryAfterAlwaysCapped(t *testing.T) {
	inTwoHours := newFakeClock().Now().Add(2 * time.Hour).Format(http.TimeFormat)
	tests := []struct {
		name       string
		budget     time.Duration
		maxBackoff time.Duration
		retryAfter string
		wantWaits  []time.Duration // nil: the 503 is returned without a retry
	}{
		{"no budget, an hour", -1, 0, "3600", nil},
		{"no budget, overflowing seconds", -1, 0, "99999999999999999999999", nil},
		{"no budget, a date two hours on", -1, 0, inTwoHours, nil},
		{"default budget, an hour", 0, 0, "3600", nil},
		{"a budget longer than the wait", 3 * time.Hour, 0, "3600", nil},
		{"no budget, longer than the default MaxBackoff", -1, 0, "6", nil},
		{"no budget, within MaxBackoff", -1, 0, "3", []time.Duration{3 * time.Second}},
		{"no budget, within a raised MaxBackoff", -1, 2 * time.Hour, "3600", []time.Duration{time.Hour}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &scriptedRT{steps: []step{{status: 503, retryAfter: tt.retryAfter}, {status: 201}}}
			clk := newFakeClock()
			cfg := testConfig(rt, clk)
			cfg.Budget, cfg.MaxBackoff = tt.budget, tt.maxBackoff
			resp, err := idemclient.New(cfg).RoundTrip(newRequest(t, http.MethodPost, "{}"))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if got := clk.Slept(); !slices.Equal(got, tt.wantWaits) {
				t.Errorf("waits %v, want %v", got, tt.wantWaits)
			}
			wantStatus, wantAttempts := 201, 2
			if tt.wantWaits == nil {
				wantStatus, wantAttempts = 503, 1
			}
			if resp.StatusCode != wantStatus || len(rt.Sent()) != wantAttempts {
				t.Errorf("status %d after %d attempts, want %d after %d", resp.StatusCode, len(rt.Sent()), wantStatus, wantAttempts)
			}
			if wantStatus == 503 && resp.Header.Get("Retry-After") != tt.retryAfter {
				t.Errorf("Retry-After %q handed back, want the server's %q", resp.Header.Get("Retry-After"), tt.retryAfter)
			}
		})
	}
}
