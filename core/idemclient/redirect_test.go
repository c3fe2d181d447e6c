package idemclient_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idemkit/core/idemclient"
)

// TestRedirectDoesNotCarryKey: idemkit records the 307 or 308 of POST /a
// under the caller's key. http.Client repeats the POST at /b with the
// original request's headers; were that key sent again, idemkit would see
// it reused on another path and answer 422. The hop to /b gets a key of
// its own, derived from the caller's and the new target, so the charge is
// made once, and a later retry of the whole call gets it replayed.
func TestRedirectDoesNotCarryKey(t *testing.T) {
	for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			app := newBank()
			var mu sync.Mutex
			var keysAtB [][]string
			mux := http.NewServeMux()
			mux.HandleFunc("POST /a", func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, "/b", status)
			})
			mux.Handle("POST /b", app)
			// The keys are read in front of idemkit, which answers a replay itself.
			srv := serve(t, mux, nil, func(h http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/b" {
						mu.Lock()
						keysAtB = append(keysAtB, r.Header.Values("Idempotency-Key"))
						mu.Unlock()
					}
					h.ServeHTTP(w, r)
				})
			})
			clk := newFakeClock()
			client := idemclient.NewClient(idemclient.Config{Base: freshConnections(t), Now: clk.Now, Sleep: clk.Sleep})
			const callerKey = `"order-7"`
			post := func() (int, string, idemclient.Result) {
				t.Helper()
				req, err := http.NewRequest(http.MethodPost, srv.URL+"/a", strings.NewReader(`{"amount":700}`))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Idempotency-Key", callerKey)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				out, _ := idemclient.Outcome(resp)
				return resp.StatusCode, string(b), out
			}

			status1, body1, out1 := post()
			if status1 != http.StatusCreated || out1.Replayed {
				t.Fatalf("first call: %d %s, %+v; want a fresh 201 from /b", status1, body1, out1)
			}
			status2, body2, out2 := post() // the caller retries the whole call with its key
			if status2 != http.StatusCreated || !out2.Replayed || body2 != body1 {
				t.Errorf("second call: %d %s, %+v; want the replayed 201 %s", status2, body2, out2, body1)
			}

			mu.Lock()
			defer mu.Unlock()
			if len(keysAtB) != 2 {
				t.Fatalf("/b was reached %d times, want 2", len(keysAtB))
			}
			for i, keys := range keysAtB {
				if len(keys) != 1 || keys[0] == callerKey || keys[0] != keysAtB[0][0] {
					t.Errorf("call %d: /b got key lines %q; want one key, not the caller's, the same on every call", i+1, keys)
				}
			}
			if out1.Key != keysAtB[0][0] || out2.Key != keysAtB[0][0] {
				t.Errorf("Outcome keys %q and %q, want the key /b got, %q", out1.Key, out2.Key, keysAtB[0][0])
			}
			if got := app.seq.Load(); got != 1 {
				t.Errorf("%d charges, want 1", got)
			}
		})
	}
}

// TestRedirectKeepsKeyChosenForHop: a key a CheckRedirect function set on
// the redirected request is the caller's choice for that target, and is sent
// as it is.
func TestRedirectKeepsKeyChosenForHop(t *testing.T) {
	var mu sync.Mutex
	var keysAtB [][]string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/a" {
			http.Redirect(w, r, "/b", http.StatusTemporaryRedirect)
			return
		}
		mu.Lock()
		keysAtB = append(keysAtB, r.Header.Values("Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(srv.Close)
	clk := newFakeClock()
	client := idemclient.NewClient(idemclient.Config{Now: clk.Now, Sleep: clk.Sleep})
	client.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		req.Header.Set("Idempotency-Key", `"order-7-b"`)
		return nil
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/a", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Idempotency-Key", `"order-7"`)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if resp.StatusCode != http.StatusCreated || len(keysAtB) != 1 || !slices.Equal(keysAtB[0], []string{`"order-7-b"`}) {
		t.Errorf("status %d, /b got key lines %q; want 201 and exactly the hop's key", resp.StatusCode, keysAtB)
	}
}
