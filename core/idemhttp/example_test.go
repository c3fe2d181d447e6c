package idemhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
)

func Example() {
	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})

	var charges atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", func(w http.ResponseWriter, r *http.Request) {
		n := charges.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d"}`, n)
	})
	// The tenant scope: keys of different accounts never meet.
	account := idemhttp.WithScope(func(r *http.Request) string { return r.Header.Get("Authorization") })
	srv := httptest.NewServer(idemhttp.Middleware(engine, account)(mux))
	defer srv.Close()

	post := func(key, body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer acct_1")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), strings.TrimSpace(string(b)))
	}
	post(`"order-1234"`, `{"amount":1999}`)
	post(`"order-1234"`, `{ "amount": 1999 }`) // a retry: replayed, not charged again
	post(`"order-1234"`, `{"amount":2999}`)    // the same key for another charge
	fmt.Println("charges made:", charges.Load())
	// Output:
	// 201  {"id":"ch_1"}
	// 201 true {"id":"ch_1"}
	// 422  {"type":"https://github.com/idemkit/idemkit/blob/main/docs/problems.md#key-reused","title":"Idempotency-Key reused with a different request","status":422,"detail":"This Idempotency-Key was already used with a different request (method, path or body)."}
	// charges made: 1
}
