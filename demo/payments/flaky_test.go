package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/flaky"
	"github.com/idemkit/idemkit/demo/payments/internal/server"
)

// TestFlakyNetworkEveryFramework: the checkout page's fault mode works on
// every framework: a payment's first attempt is held with its key (the
// second meets 409), the third's answer breaks off, and the payment is
// made once.
func TestFlakyNetworkEveryFramework(t *testing.T) {
	for _, fw := range server.Frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			cfg := app.DefaultConfig()
			cfg.Framework, cfg.DB, cfg.ProviderLatency = fw, filepath.Join(t.TempDir(), "p.db"), 0
			cfg.FaultInjection = true
			d := start(t, cfg)
			acct, key := newAccount(), newKey()
			send := func(timeout time.Duration) (int, http.Header, error) {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/v1/charges", strings.NewReader(chargeBody))
				req.Header.Set("Authorization", "Bearer "+acct)
				req.Header.Set("Idempotency-Key", key)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(flaky.Header, flaky.Value)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return 0, nil, err
				}
				defer resp.Body.Close()
				_, err = io.ReadAll(resp.Body)
				return resp.StatusCode, resp.Header, err
			}
			began := time.Now()
			if status, _, err := send(200 * time.Millisecond); err == nil {
				t.Fatalf("attempt 1 answered %d at once, want it held", status)
			}
			if status, _, err := send(10 * time.Second); err != nil || status != 409 {
				t.Fatalf("attempt 2: %d %v, want 409 while attempt 1 is held", status, err)
			}
			if status, _, err := send(10 * time.Second); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("attempt 3: %d %v, want its answer broken off", status, err)
			}
			for {
				status, h, err := send(10 * time.Second)
				if err == nil && status == 201 {
					if h.Get(exchange.ReplayedHeader) != "true" {
						t.Fatalf("the answer after the held attempt finished is not a replay")
					}
					break
				}
				if err != nil || status != 409 || time.Since(began) > flaky.Hold+10*time.Second {
					t.Fatalf("after the faults: %d %v", status, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if b, p := d.balance(t, acct), d.provider(t, acct); b["charges"] != 1.0 || p["authorizations"] != 1.0 {
				t.Fatalf("balance %v, provider %v: want one charge, authorized once", b, p)
			}
			// Without the header, nothing is faulted.
			if r := d.do(t, http.MethodPost, "/v1/charges", acct, newKey(), chargeBody); r.status != 201 || r.replayed() {
				t.Fatalf("a charge without the fault mode: %d %s", r.status, r.body)
			}
		})
	}
}

// TestFaultInjectionOffByDefault: unless the operator turns fault
// injection on, Demo-Network: flaky is ignored: a payment's attempts that
// send it are neither held nor broken off (the third, which the fault mode
// breaks off, is replayed whole), and the checkout page shows its switch
// disabled and says why.
func TestFaultInjectionOffByDefault(t *testing.T) {
	for _, fw := range server.Frameworks {
		t.Run(fw, func(t *testing.T) {
			t.Parallel()
			cfg := app.DefaultConfig()
			cfg.Framework, cfg.DB, cfg.ProviderLatency = fw, filepath.Join(t.TempDir(), "p.db"), 0
			d := start(t, cfg)
			acct, key := newAccount(), newKey()
			h := http.Header{"Authorization": {"Bearer " + acct}, flaky.Header: {flaky.Value}}
			for attempt := 1; attempt <= 3; attempt++ {
				r := d.doHeader(t, http.MethodPost, "/v1/charges", h, key, chargeBody)
				if r.status != 201 || r.replayed() != (attempt > 1) {
					t.Fatalf("attempt %d with %s: %s: %d replayed=%v %s", attempt, flaky.Header, flaky.Value, r.status, r.replayed(), r.body)
				}
			}
			page := d.do(t, http.MethodGet, "/", "", "", "")
			if !bytes.Contains(page.body, []byte(`id="flaky" name="flaky" type="checkbox" role="switch" aria-describedby="flaky-hint" disabled>`)) ||
				!bytes.Contains(page.body, []byte(`data-fault-injection="off"`)) || !bytes.Contains(page.body, []byte("-fault-injection")) {
				t.Fatalf("the checkout page does not say that its flaky-network switch is off:\n%s", page.body)
			}
		})
	}
	// On, the page's switch works.
	cfg := app.DefaultConfig()
	cfg.DB, cfg.FaultInjection = filepath.Join(t.TempDir(), "p.db"), true
	page := start(t, cfg).do(t, http.MethodGet, "/", "", "", "")
	if bytes.Contains(page.body, []byte("disabled")) || bytes.Contains(page.body, []byte(`data-fault-injection="off"`)) {
		t.Fatalf("with fault injection on, the page disables its switch:\n%s", page.body)
	}
}
