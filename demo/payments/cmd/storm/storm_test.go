package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
)

// TestDefaultStorm is the storm's default run: 2,000 charges, 30% of the
// requests broken, on the default framework and an SQLite file.
func TestDefaultStorm(t *testing.T) {
	rep := runStorm(t, DefaultOptions())
	if rep.Charges != 2000 || rep.Resets+rep.Drops+rep.Delays < rep.Attempts/5 {
		t.Fatalf("the default run must send 2,000 charges with about 30%% faults: %+v", rep)
	}
}

// TestStormEveryFramework runs a shorter storm on the other frameworks, and
// on PostgreSQL.
func TestStormEveryFramework(t *testing.T) {
	for _, fw := range []string{"echo", "fiber", "nethttp"} {
		t.Run(fw, func(t *testing.T) {
			o := DefaultOptions()
			o.Framework, o.Charges, o.Concurrency = fw, 300, 20
			runStorm(t, o)
		})
	}
	t.Run("gin/postgres", func(t *testing.T) {
		dsn := os.Getenv("IDEMKIT_TEST_POSTGRES_DSN")
		if dsn == "" {
			if testing.Short() {
				return
			}
			t.Fatal("IDEMKIT_TEST_POSTGRES_DSN is not set: run the tests with `make test`, which starts PostgreSQL")
		}
		o := DefaultOptions()
		o.DB, o.Charges, o.Concurrency = dsn, 300, 20
		runStorm(t, o)
	})
}

func runStorm(t *testing.T, o Options) Report {
	t.Helper()
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	rep.Print(&sb)
	t.Logf("storm summary:\n%s", sb.String())
	if !rep.OK() || rep.Duplicates != 0 || rep.Lost != 0 {
		t.Fatalf("charges duplicated or lost")
	}
	if rep.Retries == 0 || rep.Replays == 0 || rep.Drops == 0 || rep.Resets == 0 {
		t.Fatalf("the storm did not exercise retries, replays and faults: %+v", rep)
	}
	return rep
}

// TestStormCatchesDoubleCharges points the storm at a server that charges
// on every request, idempotency key or not: the dropped responses must
// show up as duplicates and fail the run.
func TestStormCatchesDoubleCharges(t *testing.T) {
	var mu sync.Mutex
	charged := map[string][2]int64{} // account: charges, total
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		acct := r.Header.Get("Authorization")
		mu.Lock()
		defer mu.Unlock()
		if r.Method == http.MethodGet {
			json.NewEncoder(w).Encode(map[string]int64{"charges": charged[acct][0], "charged": charged[acct][1]})
			return
		}
		var body struct{ Amount int64 }
		json.NewDecoder(r.Body).Decode(&body)
		c := charged[acct]
		charged[acct] = [2]int64{c[0] + 1, c[1] + body.Amount}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	o := DefaultOptions()
	o.Target, o.Charges, o.Concurrency = srv.URL, 200, 10
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Duplicates == 0 {
		t.Fatalf("a server without idempotency passed the storm: %+v", rep)
	}
}

func TestTargetMustBeLoopback(t *testing.T) {
	for target, ok := range map[string]bool{
		"": true, "http://127.0.0.1:8080": true, "http://localhost:1": true, "http://[::1]:80": true,
		"http://10.0.0.5:8080": false, "https://example.com": false, "ftp://127.0.0.1": false, "127.0.0.1:80": false,
	} {
		if err := checkTarget(target); (err == nil) != ok {
			t.Errorf("checkTarget(%q) = %v, want ok=%v", target, err, ok)
		}
	}
}
