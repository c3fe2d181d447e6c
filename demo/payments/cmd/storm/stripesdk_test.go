package main

import (
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/demotest"
	"github.com/idemkit/idemkit/demo/payments/internal/testdb"
)

// Stripe's SDKs against the demo: each SDK makes its calls as an
// integration would, with its own idempotency keys and automatic retries,
// and reports what it saw of each (sdkResult); the storm's checks below
// are the same for every SDK.

// sdkOp is one call for an SDK to make: a charge of Amount, or a refund
// of Amount of Charge. N numbers the charge (its order), and a refund by
// its charge's. Key, if set, is the idempotency key to send instead of
// one of the SDK's own.
type sdkOp struct {
	Op     string `json:"op"` // "charge" or "refund"
	N      int    `json:"n"`
	Amount int64  `json:"amount"`
	Charge string `json:"charge,omitempty"`
	Key    string `json:"key,omitempty"`
}

// sdkResult is what the SDK saw of one call: the object it returned (ID,
// Amount, and a refund's Charge) or the error it reported, the requests
// it sent (the first and its own retries), the idempotency keys they
// carried, and whether its answer was a replay.
type sdkResult struct {
	Op       string    `json:"op"`
	N        int       `json:"n"`
	ID       string    `json:"id"`
	Amount   int64     `json:"amount"`
	Charge   string    `json:"charge"`
	Replayed bool      `json:"replayed"`
	Error    *sdkError `json:"error"`
	Attempts int       `json:"attempts"`
	Keys     []string  `json:"keys"`
}

// sdkError is an error an SDK reported: its Class (the SDK's own type),
// Stripe's error Type and Code, and the HTTP Status (0 for a call that
// got no answer).
type sdkError struct {
	Class   string `json:"class"`
	Type    string `json:"type"`
	Code    string `json:"code"`
	Status  int    `json:"status"`
	Message string `json:"message"`
}

// why sums up an error for the table of why calls failed: the status and
// code of an answer, or what happened to a call that got none.
func (e *sdkError) why() string {
	if e.Status != 0 {
		return fmt.Sprintf("%d %s", e.Status, e.Code)
	}
	if strings.Contains(strings.ToLower(e.Message), "timeout") {
		return "no answer: timeout"
	}
	return "no answer: connection broken"
}

// sdk drives one of Stripe's SDKs.
type sdk interface {
	// Name names the SDK in the table.
	Name() string
	// Calls makes the calls with the SDK pointed at base (its automatic
	// retries on, MaxNetworkRetries 3, 1 s per attempt), 20 at a time,
	// and returns one result per call, in any order.
	Calls(t *testing.T, base, secret string, ops []sdkOp) []sdkResult
	// IdempotencyError is the Class of the SDK's error for Stripe's
	// idempotency_error.
	IdempotencyError() string
}

// sdkTally is one run's table row.
type sdkTally struct {
	calls, retries, replays, failed, resent, duplicates, lost int64
	// why counts the calls that failed after their retries by why.
	why map[string]int
}

// testStripeSDK runs the storm of an SDK on SQLite and, when the test
// servers run, PostgreSQL: 300 charges and 100 refunds (40 and 10 under
// -short).
func testStripeSDK(t *testing.T, s sdk) {
	stores := map[string]string{"sqlite": filepath.Join(t.TempDir(), "p.db")}
	if pg := testdb.Postgres(t); pg != "" {
		stores["postgres"] = pg
	}
	charges, refunds := 300, 100
	if testing.Short() {
		charges, refunds = 40, 10
	}
	for _, name := range slices.Sorted(maps.Keys(stores)) {
		t.Run(name, func(t *testing.T) {
			tally := sdkStorm(t, s, stores[name], charges, refunds)
			t.Logf("%s | %s | calls %d | SDK retries %d | replays %d | failed after retries %d (sent again %d) | duplicates %d | lost %d",
				s.Name(), name, tally.calls, tally.retries, tally.replays, tally.failed, tally.resent, tally.duplicates, tally.lost)
			for _, why := range slices.Sorted(maps.Keys(tally.why)) {
				t.Logf("%s | %s | failed after retries: %d %s", s.Name(), name, tally.why[why], why)
			}
			if os.Getenv("STRIPE_SDK_TABLE") != "" {
				fmt.Printf("| %s | %s | %d | %d | %d | %d (%d) | %d | %d |\n", s.Name(), name, tally.calls, tally.retries, tally.replays,
					tally.failed, tally.why["409 idempotency_key_in_use"], tally.duplicates, tally.lost)
			}
		})
	}
}

// startDemo runs the demo in this process on db, on a loopback port, until
// the test ends, and returns its base URL.
func startDemo(t *testing.T, db string) string {
	cfg := app.DefaultConfig()
	cfg.DB, cfg.ProviderLatency = db, 20*time.Millisecond
	_, url := demotest.Start(t, cfg, slog.New(slog.DiscardHandler))
	return url
}

// sdkStorm runs the demo on db, with the storm's flaky proxy before it
// (connections reset, answers dropped, requests delayed beside their
// retry), and has the SDK make nCharges charges then nRefunds refunds
// through it. Every charge the SDK reports exists once with its amount,
// and the provider authorized each once; a call that failed after its
// retries is sent again with its key, straight at the demo, as the
// integration would, and must find the charge its attempts made, if any,
// never make a second; every answer to a key is its first, byte for byte;
// and a key reused with another amount is the SDK's idempotency error.
func sdkStorm(t *testing.T, s sdk, db string, nCharges, nRefunds int) sdkTally {
	demoURL := startDemo(t, db)

	// The SDKs give an attempt 1 s, and a delayed request is held up to
	// 2 s: long enough to go beside the SDK's retry.
	px := newProxy(demoURL, Faults{Reset: 0.10, Drop: 0.10, Delay: 0.10, DelayFor: 2 * time.Second})
	pxServer := httptest.NewServer(px)
	defer pxServer.Close()
	defer px.drain()
	secret := "sk_test_" + strings.ToLower(rand.Text()[:10])

	tally := sdkTally{why: map[string]int{}}
	count := func(results []sdkResult, want int) {
		if len(results) != want {
			t.Fatalf("%s reported %d calls, want %d", s.Name(), len(results), want)
		}
		for _, r := range results {
			if len(r.Keys) != 1 || r.Keys[0] == "" || r.Attempts < 1 {
				t.Fatalf("%s call %s %d: %d requests with idempotency keys %q: want each request of a call under one key of the SDK's", s.Name(), r.Op, r.N, r.Attempts, r.Keys)
			}
			tally.calls++
			tally.retries += int64(r.Attempts - 1)
			if r.Replayed {
				tally.replays++
			}
			if r.Error != nil {
				tally.failed++
				tally.why[r.Error.why()]++
			}
		}
	}

	charges := make([]sdkOp, nCharges)
	for i := range charges {
		charges[i] = sdkOp{Op: "charge", N: i, Amount: int64(1000 + i)}
	}
	results := s.Calls(t, pxServer.URL, secret, charges)
	count(results, nCharges)
	ids := make([]string, nCharges)
	created := map[string]int64{} // charge id: amount, as the SDK reported
	var again []sdkOp
	for _, r := range results {
		if r.Error != nil {
			op := charges[r.N]
			op.Key = r.Keys[0]
			again = append(again, op)
			continue
		}
		if r.Amount != charges[r.N].Amount || r.ID == "" {
			t.Errorf("charge %d reported %s of %d, want %d", r.N, r.ID, r.Amount, charges[r.N].Amount)
		}
		created[r.ID], ids[r.N] = r.Amount, r.ID
	}
	// A call that failed after all its retries is sent again with its
	// key once nothing the proxy holds can still reach the demo.
	px.drain()
	for _, r := range s.Calls(t, demoURL, secret, again) {
		if r.Error != nil || r.Amount != charges[r.N].Amount {
			t.Fatalf("charge %d, failed after its retries, sent again with its key: %+v %+v", r.N, r, r.Error)
		}
		tally.resent++
		created[r.ID], ids[r.N] = r.Amount, r.ID
	}
	px.resume()

	refunds := make([]sdkOp, 0, nRefunds)
	for i := range nRefunds {
		refunds = append(refunds, sdkOp{Op: "refund", N: i, Charge: ids[i], Amount: 100})
	}
	results = s.Calls(t, pxServer.URL, secret, refunds)
	count(results, nRefunds)
	var refunded int64
	for _, r := range results {
		if r.Error != nil {
			continue
		}
		if r.Amount != 100 || r.Charge != ids[r.N] {
			t.Errorf("refund %+v, want 100 of %s", r, ids[r.N])
		}
		refunded++
	}
	px.drain()

	// Every charge the SDK reported exists, once, and the provider
	// authorized each once.
	var bal struct{ Charged, Refunded, Charges, Refunds int64 }
	if err := getJSON(t.Context(), demoURL+"/v1/balance", "Bearer "+secret, &bal); err != nil {
		t.Fatal(err)
	}
	var prov struct{ Authorizations int64 }
	if err := getJSON(t.Context(), demoURL+"/debug/provider", "Bearer "+secret, &prov); err != nil {
		t.Fatal(err)
	}
	var sum int64
	for id, amount := range created {
		var c struct{ Amount int64 }
		if err := getJSON(t.Context(), demoURL+"/v1/charges/"+id, "Bearer "+secret, &c); err != nil || c.Amount != amount {
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
	if bal.Refunds < refunded || bal.Refunds > int64(nRefunds) || bal.Refunded != 100*bal.Refunds {
		t.Errorf("%d refunds reported by the SDK, the demo has %d (%d refunded)", refunded, bal.Refunds, bal.Refunded)
	}
	// A key reused with another amount is Stripe's idempotency_error,
	// which the SDK surfaces as its own type, and charges nothing.
	key := "reuse-" + secret
	reuse := s.Calls(t, demoURL, secret, []sdkOp{{Op: "charge", N: 0, Amount: 500, Key: key}})
	if reuse[0].Error != nil {
		t.Fatalf("a charge with the key %s: %+v", key, reuse[0].Error)
	}
	reuse = s.Calls(t, demoURL, secret, []sdkOp{{Op: "charge", N: 0, Amount: 600, Key: key}})
	if e := reuse[0].Error; e == nil || e.Class != s.IdempotencyError() || e.Type != "idempotency_error" || reuse[0].Attempts != 1 {
		t.Errorf("a key reused with another amount: %+v, error %+v; want %s (idempotency_error), not retried", reuse[0], e, s.IdempotencyError())
	}
	if err := getJSON(t.Context(), demoURL+"/v1/balance", "Bearer "+secret, &bal); err != nil || bal.Charges != int64(nCharges)+1 {
		t.Errorf("after the key reused: %d charges (%v), want %d", bal.Charges, err, nCharges+1)
	}

	rep := px.answers.report()
	if rep.Changed != 0 {
		t.Errorf("%d answers differ from their key's first: %s", rep.Changed, rep.Example)
	}
	if tally.retries == 0 || tally.replays == 0 || px.counts.resets.Load()+px.counts.drops.Load()+px.counts.delays.Load() == 0 {
		t.Errorf("the run met no fault: %+v", tally)
	}
	t.Logf("proxy: %d forwarded, %d resets, %d drops, %d delays (%d late), %d conflicts (%d of them beside a delayed request); %d answers held against their key's first",
		px.counts.forwarded.Load(), px.counts.resets.Load(), px.counts.drops.Load(), px.counts.delays.Load(), px.counts.late.Load(),
		px.counts.conflicts.Load(), px.counts.pairConflicts.Load(), rep.Later)
	return tally
}

// TestStripeSDKsOnKeyInUse pins what the README says each SDK does with
// Stripe's answer to a key whose first request still runs, 409
// idempotency_key_in_use with Stripe-Should-Retry: true: stripe-node
// retries it, and gets the charge; stripe-go returns it as the call's
// error, its retries unused.
func TestStripeSDKsOnKeyInUse(t *testing.T) {
	type want struct {
		sdk      sdk
		attempts int
		err      string // the call's error, by why
	}
	sdks := []want{{stripeGo{}, 1, "409 idempotency_key_in_use"}}
	if !testing.Short() {
		sdks = append(sdks, want{newStripeNode(t), 2, ""})
	}
	for _, c := range sdks {
		t.Run(c.sdk.Name(), func(t *testing.T) {
			var mu sync.Mutex
			seen := map[string]int{}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				seen[r.Header.Get("Idempotency-Key")]++
				n := seen[r.Header.Get("Idempotency-Key")]
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				w.Header().Set("Request-Id", "req_1")
				if n == 1 {
					w.Header().Set("Stripe-Should-Retry", "true")
					w.WriteHeader(http.StatusConflict)
					io.WriteString(w, `{"error":{"type":"invalid_request_error","code":"idempotency_key_in_use","message":"in use"}}`)
					return
				}
				io.WriteString(w, `{"id":"ch_1","object":"charge","amount":1000,"currency":"usd","status":"succeeded"}`)
			}))
			defer srv.Close()
			r := c.sdk.Calls(t, srv.URL, "sk_test_1", []sdkOp{{Op: "charge", Amount: 1000}})[0]
			why := ""
			if r.Error != nil {
				why = r.Error.why()
			}
			if r.Attempts != c.attempts || why != c.err || (why == "" && r.ID != "ch_1") {
				t.Fatalf("%d requests, error %q, charge %q; want %d requests, error %q", r.Attempts, why, r.ID, c.attempts, c.err)
			}
		})
	}
}
