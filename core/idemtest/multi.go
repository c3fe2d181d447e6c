package idemtest

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
)

// TestMultiInstance checks a shared store as several instances use it:
// one Engine per store in stores (each its own connection pool or client
// to the same backend, as separate processes would have), each behind its
// own net/http server, get 200 parallel requests with one key, round
// robin. The slow handler must run exactly once, every other request get
// 409 or the replay of its one response, and afterwards every instance
// replay that response.
func TestMultiInstance(t *testing.T, stores []idem.Store) {
	t.Helper()
	const requests = 200
	var runs atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		time.Sleep(300 * time.Millisecond) // so that many requests find it running
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d}`, n)
	})
	urls := make([]string, len(stores))
	for i, s := range stores {
		e := idem.New(idem.Config{Store: s, Logger: slog.New(slog.DiscardHandler)})
		srv := httptest.NewServer(idemhttp.Middleware(e)(handler))
		t.Cleanup(srv.Close)
		urls[i] = srv.URL
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: requests}, Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)

	var (
		mu       sync.Mutex
		statuses = map[string]int{}
		bodies   = map[string]bool{}
		wg       sync.WaitGroup
	)
	send := func(i int) {
		req, _ := http.NewRequest(http.MethodPost, urls[i%len(urls)]+"/v1/orders", strings.NewReader(`{"sku":"a"}`))
		req.Header.Set("Idempotency-Key", "multi-1")
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		kind := fmt.Sprint(resp.StatusCode)
		if resp.Header.Get(idem.ReplayedHeader) == "true" {
			kind += " replayed"
		}
		mu.Lock()
		defer mu.Unlock()
		statuses[kind]++
		if resp.StatusCode == http.StatusCreated {
			bodies[string(body)] = true
		}
	}
	start := make(chan struct{})
	for i := range requests {
		wg.Go(func() {
			<-start
			send(i)
		})
	}
	close(start)
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want once (responses %v)", n, statuses)
	}
	if statuses["201"] != 1 || statuses["201"]+statuses["201 replayed"]+statuses["409"] != requests || len(bodies) != 1 {
		t.Fatalf("responses %v with %d distinct bodies; want one 201, the rest 409 or the replay of the same body", statuses, len(bodies))
	}
	t.Logf("responses: %v", statuses)
	// Once it has completed, every instance replays it.
	clear(statuses)
	for i := range 3 * len(urls) {
		wg.Go(func() { send(i) })
	}
	wg.Wait()
	if n := runs.Load(); n != 1 || statuses["201 replayed"] != 3*len(urls) || len(bodies) != 1 {
		t.Fatalf("after completion: %d runs, responses %v, %d distinct bodies; want every request replayed", n, statuses, len(bodies))
	}
}
