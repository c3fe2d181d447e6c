package idemclient_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idemkit/core/idemclient"
)

// testConfig is a Config that never waits: the fake clock records waits,
// and the jitter draw is fixed at one half.
func testConfig(base http.RoundTripper, clk *fakeClock) idemclient.Config {
	return idemclient.Config{Base: base, Now: clk.Now, Sleep: clk.Sleep, Random: func() float64 { return 0.5 }}
}

func newRequest(t *testing.T, method, body string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://api.test/v1/charges", r)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

var quotedUUID = regexp.MustCompile(`^"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$`)

func TestKeyHeader(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		callerKey  string
		keyMethods []string
		wantKey    string // "generated", "" (none) or the exact value
	}{
		{"POST gets a generated key", http.MethodPost, "", nil, "generated"},
		{"PATCH gets a generated key", http.MethodPatch, "", nil, "generated"},
		{"POST keeps the caller's key", http.MethodPost, `"order-1234"`, nil, `"order-1234"`},
		{"PATCH keeps a bare caller key", http.MethodPatch, "order-1234", nil, "order-1234"},
		{"GET gets no key", http.MethodGet, "", nil, ""},
		{"PUT gets no key", http.MethodPut, "", nil, ""},
		{"DELETE gets no key", http.MethodDelete, "", nil, ""},
		{"PUT gets a key when configured", http.MethodPut, "", []string{http.MethodPut}, "generated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &scriptedRT{steps: []step{{status: 503}, {status: 502}, {status: 200}}}
			cfg := testConfig(rt, newFakeClock())
			cfg.KeyMethods = tt.keyMethods
			req := newRequest(t, tt.method, `{"amount":100}`)
			if tt.callerKey != "" {
				req.Header.Set("Idempotency-Key", tt.callerKey)
			}
			resp, err := idemclient.New(cfg).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()

			sent := rt.Sent()
			if len(sent) != 3 {
				t.Fatalf("%d attempts, want 3", len(sent))
			}
			first := sent[0].key
			for i, s := range sent {
				if len(s.key) > 1 || !slices.Equal(s.key, first) {
					t.Errorf("attempt %d sent key %q, attempt 1 sent %q", i+1, s.key, first)
				}
				if s.method != tt.method {
					t.Errorf("attempt %d method %s, want %s", i+1, s.method, tt.method)
				}
			}
			got := ""
			if len(first) == 1 {
				got = first[0]
			}
			switch tt.wantKey {
			case "generated":
				if !quotedUUID.MatchString(got) {
					t.Errorf("key %q, want a quoted UUIDv4", got)
				}
			default:
				if got != tt.wantKey {
					t.Errorf("key %q, want %q", got, tt.wantKey)
				}
			}
			if tt.callerKey == "" && req.Header.Get("Idempotency-Key") != "" {
				t.Error("the caller's request was modified")
			}
			out, ok := idemclient.Outcome(resp)
			if !ok {
				t.Fatal("Outcome reports no result")
			}
			if out.Key != got || out.Attempts != 3 || out.Replayed {
				t.Errorf("Outcome = %+v, want key %q, 3 attempts, not replayed", out, got)
			}
		})
	}
}

func TestKeyMethodsReplaceTheDefault(t *testing.T) {
	rt := &scriptedRT{steps: []step{{status: 503}}}
	cfg := testConfig(rt, newFakeClock())
	cfg.KeyMethods = []string{http.MethodPut}
	resp, err := idemclient.New(cfg).RoundTrip(newRequest(t, http.MethodPost, "{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sent := rt.Sent()
	if len(sent) != 1 || len(sent[0].key) != 0 {
		t.Errorf("POST without KeyMethods: %d attempts with key %q, want 1 attempt without a key", len(sent), sent[0].key)
	}
}

func TestGeneratedKeysDiffer(t *testing.T) {
	rt := &scriptedRT{steps: []step{{status: 201}}}
	client := idemclient.NewClient(testConfig(rt, newFakeClock()))
	for range 2 {
		resp, err := client.Post("http://api.test/v1/charges", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	sent := rt.Sent()
	if len(sent) != 2 || sent[0].key[0] == sent[1].key[0] {
		t.Errorf("two logical requests sent keys %q and %q, want two different keys", sent[0].key, sent[1].key)
	}
}

func TestRetryByStatus(t *testing.T) {
	tests := []struct {
		method       string
		status       int
		upgrade      bool
		wantAttempts int
	}{
		{http.MethodPost, 500, false, 3},
		{http.MethodPost, 502, false, 3},
		{http.MethodPost, 503, false, 3},
		{http.MethodPost, 504, false, 3},
		{http.MethodPost, 408, false, 3},
		{http.MethodPost, 409, false, 3},
		{http.MethodPost, 425, false, 3},
		{http.MethodPost, 429, false, 3},
		{http.MethodPatch, 409, false, 3},
		{http.MethodPost, 200, false, 1},
		{http.MethodPost, 201, false, 1},
		{http.MethodPost, 303, false, 1},
		{http.MethodPost, 400, false, 1},
		{http.MethodPost, 401, false, 1},
		{http.MethodPost, 404, false, 1},
		{http.MethodPost, 413, false, 1},
		{http.MethodPost, 422, false, 1},
		{http.MethodGet, 503, false, 3},
		{http.MethodGet, 429, false, 3},
		{http.MethodGet, 409, false, 1},
		{http.MethodGet, 404, false, 1},
		{http.MethodHead, 500, false, 3},
		{http.MethodOptions, 502, false, 3},
		{http.MethodPut, 500, false, 3},
		{http.MethodPut, 409, false, 1},
		{http.MethodDelete, 503, false, 3},
		{"PURGE", 503, false, 1},
		{http.MethodGet, 503, true, 1},
		{http.MethodPost, 503, true, 1},
	}
	for _, tt := range tests {
		name := tt.method + " " + http.StatusText(tt.status)
		if tt.upgrade {
			name += " upgrade"
		}
		t.Run(name, func(t *testing.T) {
			rt := &scriptedRT{steps: []step{{status: tt.status}}}
			cfg := testConfig(rt, newFakeClock())
			cfg.MaxAttempts = 3
			req := newRequest(t, tt.method, "")
			if tt.upgrade {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "websocket")
			}
			resp, err := idemclient.New(cfg).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if got := len(rt.Sent()); got != tt.wantAttempts {
				t.Errorf("%d attempts, want %d", got, tt.wantAttempts)
			}
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
			// The final response is handed over unread, whatever it is.
			if b, _ := io.ReadAll(resp.Body); !strings.HasSuffix(string(b), http.StatusText(tt.status)) {
				t.Errorf("final body %q was not the last answer's", b)
			}
			out, ok := idemclient.Outcome(resp)
			managed := tt.method != "PURGE" && !tt.upgrade
			if ok != managed {
				t.Fatalf("Outcome ok = %v, want %v", ok, managed)
			}
			if ok && out.Attempts != tt.wantAttempts {
				t.Errorf("Outcome.Attempts = %d, want %d", out.Attempts, tt.wantAttempts)
			}
		})
	}
}

func TestRetryNetworkErrors(t *testing.T) {
	reset := &netError{syscall.ECONNRESET}
	t.Run("transient errors are retried", func(t *testing.T) {
		rt := &scriptedRT{steps: []step{{err: reset}, {err: io.ErrUnexpectedEOF}, {err: context.DeadlineExceeded}, {status: 201}}}
		clk := newFakeClock()
		resp, err := idemclient.New(testConfig(rt, clk)).RoundTrip(newRequest(t, http.MethodPost, "{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 || len(rt.Sent()) != 4 {
			t.Errorf("status %d after %d attempts, want 201 after 4", resp.StatusCode, len(rt.Sent()))
		}
		want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}
		if got := clk.Slept(); !slices.Equal(got, want) {
			t.Errorf("waits %v, want %v", got, want)
		}
	})
	t.Run("attempts run out", func(t *testing.T) {
		rt := &scriptedRT{steps: []step{{err: reset}}}
		_, err := idemclient.New(testConfig(rt, newFakeClock())).RoundTrip(newRequest(t, http.MethodPost, "{}"))
		var e *idemclient.Error
		if !errors.As(err, &e) {
			t.Fatalf("error %v, want *idemclient.Error", err)
		}
		if e.Attempts != idemclient.DefaultMaxAttempts || !quotedUUID.MatchString(e.Key) || !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("error %+v, want %d attempts, the key and ECONNRESET", e, idemclient.DefaultMaxAttempts)
		}
		if got := len(rt.Sent()); got != idemclient.DefaultMaxAttempts {
			t.Errorf("%d attempts sent, want %d", got, idemclient.DefaultMaxAttempts)
		}
	})
	t.Run("a rejected certificate is not retried", func(t *testing.T) {
		rt := &scriptedRT{steps: []step{{err: &tls.CertificateVerificationError{Err: errors.New("unknown authority")}}}}
		_, err := idemclient.New(testConfig(rt, newFakeClock())).RoundTrip(newRequest(t, http.MethodPost, "{}"))
		var e *idemclient.Error
		if !errors.As(err, &e) || e.Attempts != 1 || len(rt.Sent()) != 1 {
			t.Errorf("error %v after %d attempts, want an *idemclient.Error after 1", err, len(rt.Sent()))
		}
	})
}

// netError is a network error as the net package reports them.
type netError struct{ errno syscall.Errno }

func (e *netError) Error() string   { return "read tcp 127.0.0.1:1->127.0.0.1:2: " + e.errno.Error() }
func (e *netError) Unwrap() error   { return e.errno }
func (e *netError) Timeout() bool   { return false }
func (e *netError) Temporary() bool { return false }

func TestBodyRewound(t *testing.T) {
	rt := &scriptedRT{steps: []step{{status: 503}, {err: io.ErrUnexpectedEOF}, {status: 201}}}
	const payload = `{"amount":1999,"currency":"eur"}`
	resp, err := idemclient.New(testConfig(rt, newFakeClock())).RoundTrip(newRequest(t, http.MethodPost, payload))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	sent := rt.Sent()
	if len(sent) != 3 {
		t.Fatalf("%d attempts, want 3", len(sent))
	}
	for i, s := range sent {
		if s.body != payload {
			t.Errorf("attempt %d sent body %q, want %q", i+1, s.body, payload)
		}
	}
}

func TestBodyNotRewindable(t *testing.T) {
	tests := []struct {
		name        string
		method      string
		maxAttempts int
		wantRefused bool
	}{
		{"POST refused", http.MethodPost, 0, true},
		{"PUT refused", http.MethodPut, 0, true},
		{"POST sent once without retries", http.MethodPost, 1, false},
		{"a method never retried is sent", "PURGE", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &scriptedRT{steps: []step{{status: 201}}}
			cfg := testConfig(rt, newFakeClock())
			cfg.MaxAttempts = tt.maxAttempts
			body := &closeTracker{Reader: strings.NewReader("{}")}
			req, err := http.NewRequest(tt.method, "http://api.test/v1/charges", body)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := idemclient.NewClient(cfg).Do(req)
			if !tt.wantRefused {
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if len(rt.Sent()) != 1 {
					t.Errorf("%d attempts, want 1", len(rt.Sent()))
				}
				return
			}
			if !errors.Is(err, idemclient.ErrBodyNotRewindable) {
				t.Fatalf("error %v, want ErrBodyNotRewindable", err)
			}
			if len(rt.Sent()) != 0 {
				t.Errorf("%d attempts sent, want none", len(rt.Sent()))
			}
			if !body.Closed() {
				t.Error("the refused request's body was not closed")
			}
		})
	}
}

func TestContextEnds(t *testing.T) {
	t.Run("during a wait", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rt := &scriptedRT{steps: []step{{status: 503, retryAfter: "20"}}}
		rt.before = func(context.Context, int) error {
			time.AfterFunc(20*time.Millisecond, cancel)
			return nil
		}
		tr := idemclient.New(idemclient.Config{Base: rt, MaxBackoff: time.Minute}) // the real sleep: it must end with the context
		req := newRequest(t, http.MethodPost, "{}").WithContext(ctx)
		start := time.Now()
		_, err := tr.RoundTrip(req)
		if elapsed := time.Since(start); elapsed > 5*time.Second {
			t.Errorf("returned after %v: the wait outlived the context", elapsed)
		}
		var e *idemclient.Error
		if !errors.Is(err, context.Canceled) || !errors.As(err, &e) || e.Attempts != 1 {
			t.Errorf("error %v, want context.Canceled after 1 attempt", err)
		}
		if len(rt.Sent()) != 1 {
			t.Errorf("%d attempts, want 1", len(rt.Sent()))
		}
	})
	t.Run("during an attempt", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		rt := &scriptedRT{steps: []step{{status: 503}}}
		rt.before = func(ctx context.Context, _ int) error {
			time.AfterFunc(10*time.Millisecond, cancel)
			<-ctx.Done()
			return errors.New("connection aborted") // what a transport may say, without wrapping the cause
		}
		_, err := idemclient.New(testConfig(rt, newFakeClock())).RoundTrip(newRequest(t, http.MethodPost, "{}").WithContext(ctx))
		var e *idemclient.Error
		if !errors.Is(err, context.Canceled) || !errors.As(err, &e) || e.Attempts != 1 {
			t.Errorf("error %v, want context.Canceled after 1 attempt", err)
		}
		if len(rt.Sent()) != 1 {
			t.Errorf("%d attempts, want 1", len(rt.Sent()))
		}
	})
	t.Run("before the first attempt", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		rt := &scriptedRT{steps: []step{{status: 201}}}
		body := &closeTracker{Reader: strings.NewReader("{}")}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://api.test/", body)
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("{}")), nil }
		_, err := idemclient.New(testConfig(rt, newFakeClock())).RoundTrip(req)
		var e *idemclient.Error
		if !errors.Is(err, context.Canceled) || !errors.As(err, &e) || e.Attempts != 0 {
			t.Errorf("error %v, want context.Canceled after 0 attempts", err)
		}
		if len(rt.Sent()) != 0 || !body.Closed() {
			t.Errorf("%d attempts sent, body closed %v; want none sent and the body closed", len(rt.Sent()), body.Closed())
		}
	})
	t.Run("deadline shorter than the backoff", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rt := &scriptedRT{steps: []step{{status: 503}}}
		cfg := idemclient.Config{Base: rt, BaseBackoff: 10 * time.Minute, MaxBackoff: time.Hour, MaxAttempts: 100, Budget: -1,
			Random: func() float64 { return 0.99 },
			Sleep: func(context.Context, time.Duration) error {
				t.Error("a wait past the deadline was started")
				return nil
			}}
		resp, err := idemclient.New(cfg).RoundTrip(newRequest(t, http.MethodGet, "").WithContext(ctx))
		if err != nil {
			t.Fatalf("error %v, want the 503 answer", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 || len(rt.Sent()) != 1 {
			t.Errorf("status %d after %d attempts, want 503 after 1", resp.StatusCode, len(rt.Sent()))
		}
	})
}

func TestRetryAfterHonoured(t *testing.T) {
	clkNow := newFakeClock().Now()
	tests := []struct {
		name       string
		status     int
		retryAfter string
		maxBackoff time.Duration
		wantWait   time.Duration
	}{
		{"seconds on 503", 503, "2", 0, 2 * time.Second},
		{"seconds on 429", 429, "7", 10 * time.Second, 7 * time.Second},
		{"seconds on 409", 409, "1", 0, time.Second},
		{"beyond the backoff ceilings, within MaxBackoff", 503, "12", 20 * time.Second, 12 * time.Second},
		{"HTTP date", 503, clkNow.Add(20 * time.Second).Format(http.TimeFormat), 20 * time.Second, 20 * time.Second},
		{"HTTP date in the past", 503, clkNow.Add(-time.Minute).Format(http.TimeFormat), 0, 0},
		{"malformed: backoff instead", 503, "soon", 0, 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &scriptedRT{steps: []step{{status: tt.status, retryAfter: tt.retryAfter}, {status: 201}}}
			clk := newFakeClock()
			cfg := testConfig(rt, clk)
			cfg.MaxBackoff = tt.maxBackoff
			resp, err := idemclient.New(cfg).RoundTrip(newRequest(t, http.MethodPost, "{}"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := clk.Slept(); !slices.Equal(got, []time.Duration{tt.wantWait}) {
				t.Errorf("waits %v, want [%v]", got, tt.wantWait)
			}
		})
	}
	t.Run("beyond the budget: the answer is returned at once", func(t *testing.T) {
		rt := &scriptedRT{steps: []step{{status: 503, retryAfter: "31"}, {status: 201}}}
		clk := newFakeClock()
		cfg := testConfig(rt, clk)
		cfg.MaxBackoff = time.Minute // the budget, not MaxBackoff, is what the wait exceeds
		resp, err := idemclient.New(cfg).RoundTrip(newRequest(t, http.MethodPost, "{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 503 || len(rt.Sent()) != 1 || len(clk.Slept()) != 0 {
			t.Errorf("status %d after %d attempts and waits %v; want 503 after 1 attempt, no wait",
				resp.StatusCode, len(rt.Sent()), clk.Slept())
		}
	})
}

func TestBackoffBounds(t *testing.T) {
	t.Run("bounded by the maximum", func(t *testing.T) {
		rt := &scriptedRT{steps: []step{{status: 503}}}
		clk := newFakeClock()
		cfg := testConfig(rt, clk)
		cfg.MaxAttempts, cfg.MaxBackoff, cfg.Budget = 8, time.Second, -1
		resp, err := idemclient.New(cfg).RoundTrip(newRequest(t, http.MethodPost, "{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		ms := time.Millisecond
		want := []time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 500 * ms, 500 * ms, 500 * ms}
		if got := clk.Slept(); !slices.Equal(got, want) {
			t.Errorf("waits %v, want %v", got, want)
		}
		if len(rt.Sent()) != 8 {
			t.Errorf("%d attempts, want 8", len(rt.Sent()))
		}
	})
	t.Run("bounded by the budget", func(t *testing.T) {
		rt := &scriptedRT{steps: []step{{status: 503}}}
		clk := newFakeClock()
		cfg := testConfig(rt, clk)
		cfg.MaxAttempts, cfg.BaseBackoff, cfg.MaxBackoff, cfg.Budget = 100, time.Second, 8*time.Second, 10*time.Second
		resp, err := idemclient.New(cfg).RoundTrip(newRequest(t, http.MethodPost, "{}"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		// Waits of 0.5+1+2+4 s reach 7.5 s; the next, 4 s, would end past 10 s.
		want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}
		if got := clk.Slept(); !slices.Equal(got, want) {
			t.Errorf("waits %v, want %v", got, want)
		}
		out, _ := idemclient.Outcome(resp)
		if resp.StatusCode != 503 || out.Attempts != 5 || len(rt.Sent()) != 5 {
			t.Errorf("status %d, Outcome %+v, %d sent; want the last 503 after 5 attempts", resp.StatusCode, out, len(rt.Sent()))
		}
	})
	t.Run("the budget counts time spent in attempts", func(t *testing.T) {
		clk := newFakeClock()
		rt := &scriptedRT{steps: []step{{status: 503}}}
		rt.before = func(context.Context, int) error {
			clk.mu.Lock()
			clk.now = clk.now.Add(4 * time.Second) // each attempt takes 4 s
			clk.mu.Unlock()
			return nil
		}
		cfg := testConfig(rt, clk)
		cfg.MaxAttempts, cfg.Budget = 100, 10*time.Second
		resp, err := idemclient.New(cfg).RoundTrip(newRequest(t, http.MethodPost, "{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		// Attempts start at 0, 4.05 and 8.15 s; after the third, 12.35 s > 10 s.
		if len(rt.Sent()) != 3 {
			t.Errorf("%d attempts, want 3", len(rt.Sent()))
		}
	})
}

func TestDiscardedBodiesDrainedAndClosed(t *testing.T) {
	rt := &scriptedRT{steps: []step{{status: 503}, {status: 429}, {status: 201}}}
	resp, err := idemclient.New(testConfig(rt, newFakeClock())).RoundTrip(newRequest(t, http.MethodPost, "{}"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rt.bodies) != 3 {
		t.Fatalf("%d responses, want 3", len(rt.bodies))
	}
	for i, b := range rt.bodies[:2] {
		if eof, closed := b.state(); !eof || !closed {
			t.Errorf("discarded body %d: read to the end %v, closed %v; want both", i+1, eof, closed)
		}
	}
	if eof, closed := rt.bodies[2].state(); eof || closed {
		t.Errorf("returned body: read %v, closed %v; want it untouched", eof, closed)
	}
	resp.Body.Close()
}

func TestAttemptTimeout(t *testing.T) {
	rt := &scriptedRT{steps: []step{{status: 201}}}
	rt.before = func(ctx context.Context, attempt int) error {
		if attempt == 1 {
			<-ctx.Done() // a server that never answers
			return ctx.Err()
		}
		return nil
	}
	cfg := testConfig(rt, newFakeClock())
	cfg.AttemptTimeout = 20 * time.Millisecond
	resp, err := idemclient.New(cfg).RoundTrip(newRequest(t, http.MethodPost, "{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := idemclient.Outcome(resp)
	if resp.StatusCode != 201 || out.Attempts != 2 {
		t.Errorf("status %d after %d attempts, want 201 after 2", resp.StatusCode, out.Attempts)
	}
}

func TestOutcomeReplayed(t *testing.T) {
	rt := &scriptedRT{steps: []step{{err: io.ErrUnexpectedEOF}, {status: 201, replayed: true}}}
	resp, err := idemclient.New(testConfig(rt, newFakeClock())).RoundTrip(newRequest(t, http.MethodPost, "{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	out, ok := idemclient.Outcome(resp)
	if !ok || !out.Replayed || out.Attempts != 2 || out.Key != rt.Sent()[0].key[0] {
		t.Errorf("Outcome = %+v, %v; want replayed after 2 attempts with the key sent", out, ok)
	}
	if _, ok := idemclient.Outcome(&http.Response{}); ok {
		t.Error("Outcome of a foreign response reports a result")
	}
}

// bareRT answers without setting Response.Request, as some fakes and
// wrappers do.
type bareRT struct{}

func (bareRT) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
}

func TestOutcomeWithoutResponseRequest(t *testing.T) {
	resp, err := idemclient.New(idemclient.Config{Base: bareRT{}}).RoundTrip(newRequest(t, http.MethodPost, "{}"))
	if err != nil {
		t.Fatal(err)
	}
	out, ok := idemclient.Outcome(resp)
	if !ok || out.Attempts != 1 || !quotedUUID.MatchString(out.Key) {
		t.Errorf("Outcome = %+v, %v; want one attempt with a generated key", out, ok)
	}
}
