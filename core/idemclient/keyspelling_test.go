package idemclient_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idemkit/core/idemclient"
)

// TestKeyUnderAnySpelling: a key the caller set under another spelling of
// the header name is found and reused, and every attempt carries exactly
// one key field line, under the canonical name.
func TestKeyUnderAnySpelling(t *testing.T) {
	tests := []struct {
		name   string
		header http.Header
	}{
		{"lower case", http.Header{"idempotency-key": {`"k-1"`}}},
		{"upper case", http.Header{"IDEMPOTENCY-KEY": {`"k-1"`}}},
		{"canonical and lower case, same value", http.Header{"Idempotency-Key": {`"k-1"`}, "idempotency-key": {`"k-1"`}}},
		{"twice under one spelling, same value", http.Header{"idempotency-key": {`"k-1"`, `"k-1"`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var seen [][]string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen = append(seen, r.Header.Values("Idempotency-Key")) // every spelling, one entry per field line
				n := len(seen)
				mu.Unlock()
				if n == 1 {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusCreated)
			}))
			t.Cleanup(srv.Close)
			clk := newFakeClock()
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.header {
				req.Header[k] = slices.Clone(v) // direct map assignment, as callers do
			}
			resp, err := idemclient.NewClient(idemclient.Config{Now: clk.Now, Sleep: clk.Sleep}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			mu.Lock()
			defer mu.Unlock()
			if resp.StatusCode != 201 || len(seen) != 2 {
				t.Fatalf("status %d after %d attempts, want 201 after 2", resp.StatusCode, len(seen))
			}
			for i, keys := range seen {
				if !slices.Equal(keys, []string{`"k-1"`}) {
					t.Errorf("attempt %d sent key lines %q, want exactly the caller's [\"k-1\"]", i+1, keys)
				}
			}
			if out, _ := idemclient.Outcome(resp); out.Key != `"k-1"` {
				t.Errorf("Outcome.Key %q, want the caller's", out.Key)
			}
			for k, v := range tt.header {
				if !slices.Equal(req.Header[k], v) || len(req.Header) != len(tt.header) {
					t.Errorf("the caller's header was modified: %v", req.Header)
				}
			}
		})
	}
	t.Run("two different keys are refused", func(t *testing.T) {
		rt := &scriptedRT{steps: []step{{status: 201}}}
		req := newRequest(t, http.MethodPost, "{}")
		req.Header["Idempotency-Key"] = []string{`"k-1"`}
		req.Header["idempotency-key"] = []string{`"k-2"`}
		_, err := idemclient.New(testConfig(rt, newFakeClock())).RoundTrip(req)
		if !errors.Is(err, idemclient.ErrMultipleKeys) || len(rt.Sent()) != 0 {
			t.Errorf("error %v after %d attempts, want ErrMultipleKeys before any", err, len(rt.Sent()))
		}
	})
}
