package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/redisserver"
)

// TestDefaultStorm is the storm's default run: 2,000 charges, 30% of the
// requests broken, on the default framework and an SQLite file.
func TestDefaultStorm(t *testing.T) {
	rep := runStorm(t, DefaultOptions())
	if rep.Charges != 2000 || rep.Resets+rep.Drops+rep.Delays < rep.Attempts/5 {
		t.Fatalf("the default run must send 2,000 charges with about 30%% faults: %+v", rep)
	}
}

// TestStormRefusesALeaseIdemkitCannotKeep: an in-process demo with a
// lease outside idemkit's range is an error of the run, not a panic.
func TestStormRefusesALeaseIdemkitCannotKeep(t *testing.T) {
	o := DefaultOptions()
	o.Charges, o.Lease = 1, 50*time.Millisecond
	if _, err := Run(t.Context(), o); err == nil || !strings.Contains(err.Error(), "-lease") {
		t.Fatalf("a storm with -lease %v: %v, want an error naming -lease", o.Lease, err)
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
	if rep.PairConflicts == 0 {
		t.Fatalf("no delayed request and its retry met at the server (no 409 between them): the delays did not overlap a retry with its original: %+v", rep)
	}
	return rep
}

// fakeDemo is a stand-in for the demo that is wrong in a chosen way, for
// the storm to catch. It serves the endpoints the storm reads: charges,
// their list, the balance and the provider's counts.
type fakeDemo struct {
	// idempotent replays a charge whose key it has seen; otherwise every
	// request charges, key or not.
	idempotent bool
	// record turns a charge's description and amount into the rows
	// written; nil writes the one row asked for.
	record func(description string, amount int64) []fakeRow
	// extraAuthorizations are provider authorizations no charge accounts for.
	extraAuthorizations int64

	mu    sync.Mutex
	keys  map[string]bool
	rows  map[string][]fakeRow // by account
	auths map[string]int64
}

type fakeRow struct {
	Description string `json:"description"`
	Amount      int64  `json:"amount"`
}

func (f *fakeDemo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	acct := r.Header.Get("Authorization")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys == nil {
		f.keys, f.rows, f.auths = map[string]bool{}, map[string][]fakeRow{}, map[string]int64{}
	}
	switch r.Method + " " + r.URL.Path {
	case "POST /v1/charges":
		var body fakeRow
		json.NewDecoder(r.Body).Decode(&body)
		k := acct + "\x00" + r.Header.Get("Idempotency-Key")
		if f.idempotent && f.keys[k] {
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(http.StatusCreated)
			return
		}
		f.keys[k] = true
		f.auths[acct]++
		rows := []fakeRow{body}
		if f.record != nil {
			rows = f.record(body.Description, body.Amount)
		}
		f.rows[acct] = append(f.rows[acct], rows...)
		w.WriteHeader(http.StatusCreated)
	case "GET /v1/charges":
		data := []map[string]any{}
		for i, c := range f.rows[acct] {
			data = append(data, map[string]any{"id": fmt.Sprintf("ch_%d", i), "amount": c.Amount, "description": c.Description})
		}
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "has_more": false})
	case "GET /v1/balance":
		var sum int64
		for _, c := range f.rows[acct] {
			sum += c.Amount
		}
		json.NewEncoder(w).Encode(map[string]int64{"charges": int64(len(f.rows[acct])), "charged": sum})
	case "GET /debug/provider":
		n := f.auths[acct] + f.extraAuthorizations
		json.NewEncoder(w).Encode(map[string]int64{"calls": n, "authorizations": n})
	default:
		http.NotFound(w, r)
	}
}

// stormAgainst runs a short storm against f.
func stormAgainst(t *testing.T, f *fakeDemo) Report {
	t.Helper()
	srv := httptest.NewServer(f)
	defer srv.Close()
	o := DefaultOptions()
	o.Target, o.Charges, o.Concurrency = srv.URL, 200, 10
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	rep.Print(&sb)
	t.Logf("storm summary:\n%s", sb.String())
	return rep
}

// TestStormCatchesDoubleCharges points the storm at a server that charges
// on every request, idempotency key or not: the dropped responses must
// show up as duplicates and fail the run.
func TestStormCatchesDoubleCharges(t *testing.T) {
	if rep := stormAgainst(t, &fakeDemo{}); rep.OK() || rep.Duplicates == 0 {
		t.Fatalf("a server without idempotency passed the storm: %+v", rep)
	}
}

// TestStormChecksEveryCharge: errors that leave the count and the sum of
// the charges as expected must fail the run too. The storm holds every
// charge it sent against the rows found for it.
func TestStormChecksEveryCharge(t *testing.T) {
	amounts := map[string]int64{}
	for name, record := range map[string]func(string, int64) []fakeRow{
		// Charge 1 is lost, and charge 0 written twice, once with charge
		// 1's amount: as many charges, the same total.
		"a duplicate and a loss": func(desc string, amount int64) []fakeRow {
			if desc == "storm charge 1" {
				desc = "storm charge 0"
			}
			return []fakeRow{{desc, amount}}
		},
		// Charges 0 and 1 each get the other's amount.
		"amounts swapped": func(desc string, amount int64) []fakeRow {
			switch desc {
			case "storm charge 0", "storm charge 1":
				other := map[string]string{"storm charge 0": "storm charge 1", "storm charge 1": "storm charge 0"}[desc]
				return []fakeRow{{desc, amounts[other]}}
			}
			return []fakeRow{{desc, amount}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			// The amounts the storm sends are fixed by the charge's index.
			for i := range 2 {
				amounts[fmt.Sprintf("storm charge %d", i)] = int64(100 + (i*7919)%9900)
			}
			if rep := stormAgainst(t, &fakeDemo{idempotent: true, record: record}); rep.OK() {
				t.Fatalf("the storm passed a server that got charges wrong: %+v", rep)
			}
		})
	}
}

// TestStormCountsProviderAuthorizations: a server that records every
// charge once but took the money one time too many must fail the run.
func TestStormCountsProviderAuthorizations(t *testing.T) {
	if rep := stormAgainst(t, &fakeDemo{idempotent: true, extraAuthorizations: 1}); rep.OK() {
		t.Fatalf("the storm passed a server that authorized a payment twice: %+v", rep)
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

// TestStormAdminTarget: against a demo whose /debug/provider is on an admin
// listener of its own (-admin-addr), the storm reads the provider's counts
// from -admin-target.
func TestStormAdminTarget(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.DB, cfg.AdminAddr = filepath.Join(t.TempDir(), "p.db"), "127.0.0.1:0"
	cfg.ProviderLatency, cfg.ProviderFailureRate = 5*time.Millisecond, 0.05
	a, err := app.Open(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, apiLn, adminLn) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		a.Close()
	}()

	o := DefaultOptions()
	o.Target, o.Charges, o.Concurrency = "http://"+apiLn.Addr().String(), 100, 10
	if _, err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "/debug/provider") {
		t.Fatalf("a storm without -admin-target against a demo with an admin listener: %v, want GET /debug/provider to fail", err)
	}
	o.AdminTarget = "http://" + adminLn.Addr().String()
	runStorm(t, o)
}

// redisStorm is a short storm on the in-process demo with its records in
// a redis-server of the storm's own. The test fails, and says why, when
// there is no redis-server to start: `make test` installs it.
func redisStorm(t *testing.T, with func(*Options)) Report {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("%v; `make test` installs it through scripts/redis-servers.sh", redisserver.ErrNotInstalled)
	}
	o := DefaultOptions()
	o.Charges, o.Concurrency, o.OwnRedis = 300, 20, true
	with(&o)
	rep := runStorm(t, o)
	if !strings.HasPrefix(rep.Records, "redis://127.0.0.1:") {
		t.Fatalf("the demo did not keep its records in the storm's Redis: %+v", rep)
	}
	return rep
}

// TestStormRedis: with the records in Redis and the charges in SQLite, no
// charge is lost or made twice, and the provider takes each one's money
// once: while Redis runs, while it is killed with SIGKILL mid-storm and
// restarted on its append-only file, and while it loses every record again
// and again (FLUSHALL), which only the charges' unique constraint on their
// scoped idempotency key then keeps single.
func TestStormRedis(t *testing.T) {
	t.Run("steady", func(t *testing.T) {
		redisStorm(t, func(*Options) {})
	})
	t.Run("restart", func(t *testing.T) {
		rep := redisStorm(t, func(o *Options) { o.RedisRestartAfter, o.RedisDown = time.Second, time.Second })
		if rep.RedisRestarts != 1 || rep.StoreDown == 0 {
			t.Fatalf("Redis was not restarted while charges were sent (%d restarts, %d answers 503 store-unavailable)", rep.RedisRestarts, rep.StoreDown)
		}
	})
	t.Run("flush", func(t *testing.T) {
		rep := redisStorm(t, func(o *Options) { o.RedisFlushEvery = 200 * time.Millisecond })
		if rep.RedisFlushes == 0 || rep.Existing == 0 {
			t.Fatalf("no charge ran again after its record was lost (%d flushes, %d charges answered with their existing row): the run proved nothing",
				rep.RedisFlushes, rep.Existing)
		}
	})
}

// TestStormRedisOptions: a Redis of the storm's own is refused beside a
// -target or a -records of the user's, and missing redis-server fails the
// run with a message rather than running without Redis.
func TestStormRedisOptions(t *testing.T) {
	for name, o := range map[string]Options{
		"target":             {Target: "http://127.0.0.1:1", OwnRedis: true},
		"records":            {Records: "redis://127.0.0.1:1/0", RedisFlushEvery: time.Second},
		"target and records": {Target: "http://127.0.0.1:1", Records: "redis://127.0.0.1:1/0"},
	} {
		o.Timeout = time.Minute
		if _, err := Run(t.Context(), o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	t.Setenv("PATH", t.TempDir())
	o := DefaultOptions()
	o.RedisRestartAfter = time.Second
	if _, err := Run(t.Context(), o); !errors.Is(err, redisserver.ErrNotInstalled) {
		t.Fatalf("without redis-server: %v, want %v", err, redisserver.ErrNotInstalled)
	}
}
