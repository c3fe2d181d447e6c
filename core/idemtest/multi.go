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
	"github.com/idemkit/idemkit/core/exchange"
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
	m := &instances{
		urls:     serveInstances(t, stores, &runs),
		client:   &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: requests}, Timeout: time.Minute},
		statuses: map[string]int{},
		bodies:   map[string]bool{},
	}
	t.Cleanup(m.client.CloseIdleConnections)
	m.sendAll(t, requests)
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want once (responses %v)", n, m.statuses)
	}
	if m.statuses["201"] != 1 || m.statuses["201"]+m.statuses["201 replayed"]+m.statuses["409"] != requests || len(m.bodies) != 1 {
		t.Fatalf("responses %v with %d distinct bodies; want one 201, the rest 409 or the replay of the same body", m.statuses, len(m.bodies))
	}
	t.Logf("responses: %v", m.statuses)
	// Once it has completed, every instance replays it.
	clear(m.statuses)
	m.sendAll(t, 3*len(m.urls))
	if n := runs.Load(); n != 1 || m.statuses["201 replayed"] != 3*len(m.urls) || len(m.bodies) != 1 {
		t.Fatalf("after completion: %d runs, responses %v, %d distinct bodies; want every request replayed", n, m.statuses, len(m.bodies))
	}
}

// serveInstances serves a slow handler, which counts its runs in runs,
// behind one Engine per store, each on a server of its own, until the test
// ends, and returns their URLs.
func serveInstances(t *testing.T, stores []idem.Store, runs *atomic.Int32) []string {
	t.Helper()
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
	return urls
}

// instances sends TestMultiInstance's requests and tallies the answers.
type instances struct {
	urls   []string
	client *http.Client
	mu     sync.Mutex
	// statuses counts the answers by status, "replayed" added to replays;
	// bodies holds the distinct bodies of the 201s.
	statuses map[string]int
	bodies   map[string]bool
}

// sendAll sends n requests at once, round robin over the instances, and
// tallies their answers.
func (m *instances) sendAll(t *testing.T, n int) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			m.send(t, i)
		})
	}
	close(start)
	wg.Wait() // each request ends by the client's timeout
}

func (m *instances) send(t *testing.T, i int) {
	req, _ := http.NewRequest(http.MethodPost, m.urls[i%len(m.urls)]+"/v1/orders", strings.NewReader(`{"sku":"a"}`))
	req.Header.Set("Idempotency-Key", "multi-1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := m.client.Do(req)
	if err != nil {
		t.Error(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	kind := fmt.Sprint(resp.StatusCode)
	if resp.Header.Get(exchange.ReplayedHeader) == "true" {
		kind += " replayed"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.statuses[kind]++
	if resp.StatusCode == http.StatusCreated {
		m.bodies[string(body)] = true
	}
}
