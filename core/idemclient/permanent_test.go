package idemclient_test

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/core/idemclient"
)

// TestPermanentStatusesNotRetried: a server that cannot serve the request
// as sent (it lacks the method or the HTTP version, or a proxy wants a
// login) answers the same way to every attempt.
func TestPermanentStatusesNotRetried(t *testing.T) {
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		for _, status := range []int{501, 505, 506, 508, 510, 511} {
			t.Run(method+" "+http.StatusText(status), func(t *testing.T) {
				rt := &scriptedRT{steps: []step{{status: status}, {status: 201}}}
				clk := newFakeClock()
				resp, err := idemclient.New(testConfig(rt, clk)).RoundTrip(newRequest(t, method, ""))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != status || len(rt.Sent()) != 1 || len(clk.Slept()) != 0 {
					t.Errorf("status %d after %d attempts, waits %v; want %d after 1, no wait",
						resp.StatusCode, len(rt.Sent()), clk.Slept(), status)
				}
			})
		}
	}
}

// TestPermanentErrorsNotRetried: a request net/http refuses to send, or
// cannot route, fails the same way on every attempt, so it fails at once.
func TestPermanentErrorsNotRetried(t *testing.T) {
	badProxy := &http.Transport{Proxy: func(*http.Request) (*url.URL, error) {
		//lint:ignore SA1007 the case is a proxy setting that does not parse
		return url.Parse("http://bad proxy:3128")
	}}
	tests := []struct {
		name    string
		base    *http.Transport
		prepare func(*http.Request)
		wantMsg string
	}{
		{"unsupported scheme", nil, func(r *http.Request) { r.URL.Scheme = "ftp" }, "unsupported protocol scheme"},
		{"no host", nil, func(r *http.Request) { r.URL.Host = "" }, "no Host"},
		{"no URL", nil, func(r *http.Request) { r.URL = nil }, "nil Request.URL"},
		{"invalid port", nil, func(r *http.Request) { r.URL.Host = "127.0.0.1:99999" }, "invalid port"},
		{"invalid header field name", nil, func(r *http.Request) { r.Header["X Trace"] = []string{"1"} }, "invalid header"},
		{"invalid header field value", nil, func(r *http.Request) { r.Header.Set("X-Trace", "a\r\nInjected: 1") }, "invalid header"},
		{"invalid key value", nil, func(r *http.Request) { r.Header.Set("Idempotency-Key", "\"k\"\nX: 1") }, "invalid header"},
		{"malformed proxy URL", badProxy, func(*http.Request) {}, "invalid character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := tt.base
			if base == nil {
				base = &http.Transport{}
			}
			t.Cleanup(base.CloseIdleConnections)
			clk := newFakeClock()
			cfg := idemclient.Config{Base: base, Now: clk.Now, Sleep: clk.Sleep}
			// Port 9 (discard) on loopback: nothing is expected to answer, and
			// no case should get as far as dialling.
			req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:9/v1/charges", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			tt.prepare(req)
			_, err = idemclient.New(cfg).RoundTrip(req)
			var e *idemclient.Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("error %v, want an *idemclient.Error saying %q", err, tt.wantMsg)
			}
			if e.Attempts != 1 || len(clk.Slept()) != 0 {
				t.Errorf("%d attempts, waits %v; want 1 attempt, no wait", e.Attempts, clk.Slept())
			}
		})
	}
}
