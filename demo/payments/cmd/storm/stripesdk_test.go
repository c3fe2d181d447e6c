package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v83"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/testdb"
)

// sdkCall is what the transport saw of one SDK call: its attempts, the
// idempotency key the SDK generated for it, and the replays it got.
type sdkCall struct {
	attempts, replays atomic.Int64
	key               atomic.Pointer[string]
}

type callKey struct{}

// sdkTransport counts each SDK call's attempts (the first and the SDK's
// own retries) and the replays it was answered with.
type sdkTransport struct{ base http.RoundTripper }

func (s sdkTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c, _ := r.Context().Value(callKey{}).(*sdkCall)
	if c != nil {
		c.attempts.Add(1)
		key := r.Header.Get("Idempotency-Key")
		c.key.CompareAndSwap(nil, &key)
		if *c.key.Load() != key {
			return nil, fmt.Errorf("the SDK retried a call under another idempotency key: %q then %q", *c.key.Load(), key)
		}
	}
	resp, err := s.base.RoundTrip(r)
	if err == nil && c != nil && resp.Header.Get("Idempotent-Replayed") == "true" {
		c.replays.Add(1)
	}
	return resp, err
}

// sdkTally is one run's table row.
type sdkTally struct {
	calls, retries, replays, failed, resent, duplicates, lost int64
}

// TestStripeGoSDK drives stripe-go, with its own generated keys and
// MaxNetworkRetries 3, through the storm's flaky proxy (connections
// reset, answers dropped, requests delayed beside their retry) against
// the demo: 300 charges and 100 refunds, on SQLite and, when the test
// servers run, PostgreSQL.
func TestStripeGoSDK(t *testing.T) {
	stores := map[string]string{"sqlite": filepath.Join(t.TempDir(), "p.db")}
	if pg := testdb.Postgres(t); pg != "" {
		stores["postgres"] = pg
	}
	charges, refunds := 300, 100
	if testing.Short() {
		charges, refunds = 40, 10
	}
	for name, db := range stores {
		t.Run(name, func(t *testing.T) {
			tally := stripeGoRun(t, db, charges, refunds)
			t.Logf("stripe-go | %s | calls %d | SDK retries %d | replays %d | failed after retries %d (sent again %d) | duplicates %d | lost %d",
				name, tally.calls, tally.retries, tally.replays, tally.failed, tally.resent, tally.duplicates, tally.lost)
			if os.Getenv("STRIPE_SDK_TABLE") != "" {
				fmt.Printf("| stripe-go | %s | %d | %d | %d | %d | %d |\n", name, tally.calls, tally.retries, tally.replays, tally.duplicates, tally.lost)
			}
		})
	}
}

func stripeGoRun(t *testing.T, db string, nCharges, nRefunds int) sdkTally {
	cfg := app.DefaultConfig()
	cfg.DB, cfg.ProviderLatency = db, 20*time.Millisecond
	a, err := app.Open(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Server.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.Server.Shutdown(ctx)
		<-served
		a.Close()
	}()
	demoURL := "http://" + ln.Addr().String()

	// The client gives an attempt 1 s, and a delayed request is held up
	// to 2 s: long enough to go beside the SDK's retry.
	px := newProxy(demoURL, Faults{Reset: 0.10, Drop: 0.10, Delay: 0.10, DelayFor: 2 * time.Second})
	pxServer := httptest.NewServer(px)
	defer pxServer.Close()
	defer px.drain()

	newClient := func(base string) *stripe.Client {
		return stripe.NewClient("sk_test_"+acctSuffix, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{
			URL:               stripe.String(base),
			HTTPClient:        &http.Client{Timeout: time.Second, Transport: sdkTransport{http.DefaultTransport}},
			MaxNetworkRetries: stripe.Int64(3),
			LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
		})))
	}
	sc := newClient(pxServer.URL)
	account := "sk_test_" + acctSuffix

	var tally sdkTally
	var mu sync.Mutex
	created := map[string]int64{} // charge id: amount, as the SDK reported
	var failedCalls []*sdkCall
	var failedParams []*stripe.ChargeCreateParams
	var failedIdx []int
	call := func(run func(ctx context.Context) error) (*sdkCall, error) {
		c := &sdkCall{}
		err := run(context.WithValue(t.Context(), callKey{}, c))
		atomic.AddInt64(&tally.calls, 1)
		atomic.AddInt64(&tally.retries, c.attempts.Load()-1)
		atomic.AddInt64(&tally.replays, c.replays.Load())
		return c, err
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 20)
	ids := make([]string, nCharges)
	for i := range nCharges {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			p := &stripe.ChargeCreateParams{Amount: stripe.Int64(int64(1000 + i)), Currency: stripe.String("usd"),
				Source: &stripe.PaymentSourceSourceParams{Token: stripe.String("tok_visa")}, Description: stripe.String("order " + strconv.Itoa(i))}
			p.AddMetadata("order", strconv.Itoa(i))
			var ch *stripe.Charge
			c, err := call(func(ctx context.Context) (err error) { ch, err = sc.V1Charges.Create(ctx, p); return err })
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				tally.failed++
				failedCalls, failedParams, failedIdx = append(failedCalls, c), append(failedParams, p), append(failedIdx, i)
				return
			}
			created[ch.ID] = ch.Amount
			ids[i] = ch.ID
		})
	}
	wg.Wait()
	// A call that failed after all its retries is sent again with its
	// key, as the integration would: it must find the charge its attempts
	// made, if any, and never make a second.
	px.drain()
	direct := newClient(demoURL)
	for i, c := range failedCalls {
		key := c.key.Load()
		if key == nil {
			t.Fatalf("a failed call sent nothing")
		}
		p := failedParams[i]
		p.IdempotencyKey = key
		ch, err := direct.V1Charges.Create(t.Context(), p)
		if err != nil {
			t.Fatalf("a failed call sent again with its key %s: %v", *key, err)
		}
		tally.resent++
		created[ch.ID] = ch.Amount
		ids[failedIdx[i]] = ch.ID
	}
	px.resume()

	var refunded atomic.Int64
	for i := range nRefunds {
		if ids[i] == "" {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			p := &stripe.RefundCreateParams{Charge: stripe.String(ids[i]), Amount: stripe.Int64(100)}
			var ref *stripe.Refund
			_, err := call(func(ctx context.Context) (err error) { ref, err = sc.V1Refunds.Create(ctx, p); return err })
			if err != nil {
				atomic.AddInt64(&tally.failed, 1)
				return
			}
			if ref.Amount != 100 || ref.Charge == nil || ref.Charge.ID != ids[i] {
				t.Errorf("refund %+v, want 100 of %s", ref, ids[i])
			}
			refunded.Add(1)
		})
	}
	wg.Wait()
	px.drain()

	// Every charge the SDK reported exists, once, and the provider
	// authorized each once.
	var bal struct{ Charged, Refunded, Charges, Refunds int64 }
	if err := getJSON(t.Context(), demoURL+"/v1/balance", "Bearer "+account, &bal); err != nil {
		t.Fatal(err)
	}
	var prov struct{ Authorizations int64 }
	if err := getJSON(t.Context(), demoURL+"/debug/provider", "Bearer "+account, &prov); err != nil {
		t.Fatal(err)
	}
	var sum int64
	for id, amount := range created {
		var c struct{ Amount int64 }
		if err := getJSON(t.Context(), demoURL+"/v1/charges/"+id, "Bearer "+account, &c); err != nil || c.Amount != amount {
			tally.lost++
			t.Errorf("charge %s the SDK reported: %v, amount %d", id, err, c.Amount)
		}
		sum += amount
	}
	tally.duplicates = bal.Charges - int64(len(created))
	if len(created) != nCharges || bal.Charges != int64(nCharges) || bal.Charged != sum || prov.Authorizations != int64(nCharges) {
		t.Errorf("%d charges reported by the SDK, %d in the demo (%d charged, want %d), %d authorizations; want %d of each",
			len(created), bal.Charges, bal.Charged, sum, prov.Authorizations, nCharges)
	}
	if bal.Refunds < refunded.Load() || bal.Refunds > int64(nRefunds) || bal.Refunded != 100*bal.Refunds {
		t.Errorf("%d refunds reported by the SDK, the demo has %d (%d refunded)", refunded.Load(), bal.Refunds, bal.Refunded)
	}
	// A key reused with another amount is Stripe's idempotency_error,
	// which stripe-go surfaces as its own type, and charges nothing.
	reuse := &stripe.ChargeCreateParams{Amount: stripe.Int64(500), Currency: stripe.String("usd"), Customer: stripe.String("cus_reuse")}
	reuse.IdempotencyKey = stripe.String("reuse-" + acctSuffix)
	if _, err := direct.V1Charges.Create(t.Context(), reuse); err != nil {
		t.Fatal(err)
	}
	reuse.Amount = stripe.Int64(600)
	var idemErr *stripe.IdempotencyError
	if _, err := direct.V1Charges.Create(t.Context(), reuse); !errors.As(err, &idemErr) {
		t.Errorf("a key reused with another amount: %v (%T), want a *stripe.IdempotencyError", err, err)
	}
	rep := px.answers.report()
	if rep.Changed != 0 {
		t.Errorf("%d answers differ from their key's first: %s", rep.Changed, rep.Example)
	}
	if tally.retries == 0 || tally.replays == 0 || px.counts.resets.Load()+px.counts.drops.Load()+px.counts.delays.Load() == 0 {
		t.Errorf("the run met no fault: %+v", tally)
	}
	t.Logf("proxy: %d forwarded, %d resets, %d drops, %d delays (%d late), %d conflicts; %d answers held against their key's first",
		px.counts.forwarded.Load(), px.counts.resets.Load(), px.counts.drops.Load(), px.counts.delays.Load(), px.counts.late.Load(),
		px.counts.conflicts.Load(), rep.Later)
	return tally
}

// acctSuffix names the account of this process's SDK runs; each run has
// a database of its own.
var acctSuffix = strings.ToLower(rand.Text()[:10])
