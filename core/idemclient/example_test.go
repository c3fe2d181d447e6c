package idemclient_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemclient"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
)

func Example() {
	// A server whose ledger is busy on the first try: its 503 is not
	// recorded, so the client's retry, with the same key, runs the handler again.
	store := memstore.New()
	defer store.Close()
	var calls, charges atomic.Int64
	charge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			http.Error(w, "ledger busy", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"ch_%d"}`, charges.Add(1))
	})
	srv := httptest.NewServer(idemhttp.Middleware(idem.New(idem.Config{Store: store}))(charge))
	defer srv.Close()

	client := idemclient.NewClient(idemclient.Config{BaseBackoff: 10 * time.Millisecond})
	resp, err := client.Post(srv.URL+"/v1/charges", "application/json", strings.NewReader(`{"amount":1999}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out, _ := idemclient.Outcome(resp)
	fmt.Println(resp.StatusCode, string(body))
	fmt.Println("attempts:", out.Attempts, "replayed:", out.Replayed, "charges:", charges.Load())
	// Output:
	// 201 {"id":"ch_1"}
	// attempts: 2 replayed: false charges: 1
}
