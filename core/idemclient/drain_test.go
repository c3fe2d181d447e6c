package idemclient_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/core/idemclient"
)

// TestDrainWithinBudget: a retried answer's body is read only within the
// time the budget leaves. The server answers 503 at once, then trickles its
// body for 12 s; with a budget of 1 s the call must end long before that,
// every attempt started within the budget. The bound checked is loose on
// purpose: 5 s against 12 s tells a bounded drain from an unbounded one on
// any machine.
func TestDrainWithinBudget(t *testing.T) {
	const trickle = 12 * time.Second
	var attempts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempts.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
		rc := http.NewResponseController(w)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for end := time.Now().Add(trickle); time.Now().Before(end); {
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			select {
			case <-r.Context().Done(): // the client closed the connection
				return
			case <-tick.C:
			}
		}
	}))
	t.Cleanup(srv.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)

	client := idemclient.NewClient(idemclient.Config{Base: tr, Budget: time.Second})
	began := time.Now()
	resp, err := client.Post(srv.URL, "application/json", nil)
	took := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // unread: closing it ends the server's trickle
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status %d, want the last 503", resp.StatusCode)
	}
	if took > 5*time.Second {
		t.Errorf("the call took %v with a budget of 1 s: a trickling body held it", took.Round(time.Millisecond))
	}
	if n := attempts.Load(); n < 2 {
		t.Errorf("%d attempts, want a retry within the budget", n)
	}
}
