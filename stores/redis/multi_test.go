package redisstore

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

// quietEngine is an Engine on s that logs nothing.
func quietEngine(s idem.Store) *idem.Engine {
	return idem.New(idem.Config{Store: s, Logger: slog.New(slog.DiscardHandler)})
}

// TestMultiInstance: three instances, each with its own Redis client and
// Engine, behind three servers, get 200 parallel requests with one key,
// round robin. The slow handler runs exactly once; every other request
// gets 409 or the replay of the one response.
func TestMultiInstance(t *testing.T) {
	const (
		instances = 3
		requests  = 200
	)
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			prefix := testPrefix(t, top.dial(t))
			var runs atomic.Int32
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := runs.Add(1)
				time.Sleep(200 * time.Millisecond) // so that many requests find it running
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"run":%d}`, n)
			})
			urls := make([]string, instances)
			for i := range urls {
				s, err := New(top.dial(t), WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				srv := httptest.NewServer(idemhttp.Middleware(quietEngine(s))(handler))
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
				req, _ := http.NewRequest(http.MethodPost, urls[i%instances]+"/v1/orders", strings.NewReader(`{"sku":"a"}`))
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
			for i := range 3 * instances {
				wg.Go(func() { send(i) })
			}
			wg.Wait()
			if n := runs.Load(); n != 1 || statuses["201 replayed"] != 3*instances || len(bodies) != 1 {
				t.Fatalf("after completion: %d runs, responses %v, %d distinct bodies; want every request replayed", n, statuses, len(bodies))
			}
		})
	}
}
