// Command idemclient calls an idempotent endpoint through idemkit's
// retrying client: a request that meets a busy server is retried with its
// key until it gets through, and a key kept by the caller gets the
// recorded answer back.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
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

func main() {
	api := startAPI()
	defer api.Close()

	// The client: any http.Client, with idemclient's Transport in front of
	// the one it had. No Client.Timeout, which would cut the retries
	// short: Budget and the request's context bound the whole call.
	client := &http.Client{Transport: idemclient.New(idemclient.Config{
		Base:           http.DefaultTransport,
		Budget:         10 * time.Second,
		AttemptTimeout: 2 * time.Second,
	})}

	// A POST gets a fresh key, the same on every attempt: the server's
	// first answer is a 503, so the client waits and tries again.
	order(client, api.URL, "")

	// A key the caller keeps (stored with a pending order, say, to retry
	// it after a restart) is sent as it is: the same request again gets
	// the recorded answer, and the order is not created twice.
	key := idemclient.NewKey()
	order(client, api.URL, key)
	order(client, api.URL, key)
}

// order sends one order and prints what came back.
func order(client *http.Client, url, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/orders",
		strings.NewReader(`{"item":"book","quantity":1}`)) // a strings.Reader can be sent again
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err) // an *idemclient.Error inside says how many attempts were made
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		log.Fatal(err)
	}
	out, _ := idemclient.Outcome(resp)
	fmt.Printf("%d %s, after %d attempt(s), replayed: %v\n", resp.StatusCode, body, out.Attempts, out.Replayed)
}

// startAPI starts an API that creates orders behind idemkit, and answers
// its very first request 503, as a busy server would.
func startAPI() *httptest.Server {
	var calls, orders atomic.Int64
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable) // 5xx is never recorded
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, orders.Add(1))
	})
	engine := idem.New(idem.Config{Store: memstore.New()})
	return httptest.NewServer(idemhttp.Middleware(engine)(create))
}
