package memstore_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

// post sends h a JSON POST with an Idempotency-Key and, if account is not
// empty, an X-Account header, and prints the answer.
func post(h http.Handler, account, key string) {
	req := httptest.NewRequest(http.MethodPost, "/v1/charges", strings.NewReader(`{"amount":1999}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	if account != "" {
		req.Header.Set("X-Account", account)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	fmt.Printf("%s: %d", strings.TrimSpace(account+" "+key), rec.Code)
	if rec.Header().Get(exchange.ReplayedHeader) == "true" {
		fmt.Print(" replayed")
	}
	if ra := rec.Header().Get("Retry-After"); ra != "" {
		fmt.Print(" Retry-After ", ra)
	}
	fmt.Println()
}

// charge answers 201 with a new charge id on every run.
func charge() http.Handler {
	n := 0
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d"}`, n)
	})
}

// The memory store is the default for one process: records live until
// their TTL runs out, and Close stops its background purger.
func Example() {
	store := memstore.New() // 1,000,000 records, a tenth per tenant, purged every minute
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})
	h := idemhttp.Middleware(engine)(charge())

	post(h, "", `"c-1"`)
	post(h, "", `"c-1"`)
	post(h, "", `"c-2"`)
	// Output:
	// "c-1": 201
	// "c-1": 201 replayed
	// "c-2": 201
}

// A tenant at its share of the store gets 429 for a new key, while its
// keys already held are still replayed and other tenants still get keys.
func ExampleWithMaxRecordsPerScope() {
	store := memstore.New(memstore.WithMaxRecords(10), memstore.WithMaxRecordsPerScope(2))
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})
	account := idemhttp.WithScope(func(r *http.Request) string { return r.Header.Get("X-Account") })
	h := idemhttp.Middleware(engine, account)(charge())

	post(h, "acct_1", `"a"`)
	post(h, "acct_1", `"b"`)
	post(h, "acct_1", `"c"`) // a third key: acct_1 is at its share
	post(h, "acct_1", `"a"`)
	post(h, "acct_2", `"a"`)
	// Output:
	// acct_1 "a": 201
	// acct_1 "b": 201
	// acct_1 "c": 429 Retry-After 1
	// acct_1 "a": 201 replayed
	// acct_2 "a": 201
}

// With the Engine and the store on one hand-moved clock, a completed key
// is replayed for the TTL (24 h by default) and is a new key after it.
func ExampleWithClock() {
	clock := idemtest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	store := memstore.New(memstore.WithClock(clock))
	defer store.Close()
	engine := idem.New(idem.Config{Store: store, Clock: clock})
	h := idemhttp.Middleware(engine)(charge())

	post(h, "", `"c-1"`)
	clock.Advance(23 * time.Hour)
	post(h, "", `"c-1"`)
	clock.Advance(2 * time.Hour)
	post(h, "", `"c-1"`)
	// Output:
	// "c-1": 201
	// "c-1": 201 replayed
	// "c-1": 201
}
