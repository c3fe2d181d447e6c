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
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/redisserver"
	"github.com/idemkit/idemkit/demo/payments/internal/server"
	"github.com/idemkit/idemkit/demo/payments/internal/testdb"
)

// TestDefaultStorm is the storm's default run: 2,000 charges and 400
// refunds, 30% of the requests and webhooks broken, on the default
// framework and an SQLite file.
func TestDefaultStorm(t *testing.T) {
	rep := runStorm(t, DefaultOptions())
	if rep.Charges != 2000 || rep.Refunds != 400 || rep.Resets+rep.Drops+rep.Delays < rep.Attempts/5 {
		t.Fatalf("the default run must send 2,000 charges and 400 refunds with about 30%% faults: %+v", rep)
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

// TestStormEveryFramework runs a shorter storm on the other frameworks.
// TestStormEvents runs it on PostgreSQL.
func TestStormEveryFramework(t *testing.T) {
	for _, fw := range server.Frameworks {
		if fw == DefaultOptions().Framework {
			continue // TestDefaultStorm's
		}
		t.Run(fw, func(t *testing.T) {
			runStorm(t, shortStorm(func(o *Options) { o.Framework = fw }))
		})
	}
}

// shortStorm is a storm of 300 charges and 60 refunds, changed by with.
func shortStorm(with func(*Options)) Options {
	o := DefaultOptions()
	o.Charges, o.Refunds, o.Concurrency = 300, 60, 20
	with(&o)
	return o
}

// TestStormEvents: the provider's events go to a Redis stream as well as
// by webhook, and the storm's redis-server is killed with SIGKILL and
// restarted mid-storm; once everything has settled, the demo's clock is
// moved past its TTL (every record expired) and every event delivered
// again, by webhook and to the consumer group made anew from 0. Every
// event is applied exactly once, some of them through the stream, and the
// deliveries after the TTL are answered by the ledger's entries. Two runs
// cover both databases and both places for the records: SQLite with the
// records in the database, and PostgreSQL (in a database of its own: the
// demo's provider settles every charge of its database) with the records
// in that Redis, whose restart then also fails completions under way: a
// provider that takes 200 ms keeps charges running when Redis dies, their
// 201s go out unrecorded, and their keys run again once their lease ends,
// each answered with its first 201's bytes (runStorm holds every answer
// against its key's first). The eight 2,000-charge runs, one scenario at a
// time on each database and place: README, "The storm with events".
func TestStormEvents(t *testing.T) {
	for _, run := range []struct {
		name    string
		dsn     func(testing.TB) string
		records bool
	}{
		{"sqlite/records-in-db", func(testing.TB) string { return "" }, false},
		{"postgres/records-in-redis", testdb.Postgres, true},
	} {
		t.Run(run.name, func(t *testing.T) {
			db := run.dsn(t)
			if run.records && db == "" {
				return // PostgreSQL under -short
			}
			requireRedisServer(t)
			rep := runStorm(t, shortStorm(func(o *Options) {
				o.DB, o.EventsOwnRedis, o.OwnRedis, o.RedisRestartAfter, o.RedisDown = db, true, run.records, time.Second, time.Second
				o.RedeliverAfterTTL = true
				if run.records {
					o.ProviderLatency = 200 * time.Millisecond
				}
			}))
			if rep.RedisRestarts != 1 || rep.Events.StreamEntries == 0 || rep.Events.Unacked != 0 || (rep.Records != "") != run.records {
				t.Fatalf("Redis not restarted, no event through the stream, entries left unacknowledged, or records not where asked: %+v", rep)
			}
			// The deliveries after the TTL are answered with their ledger
			// entries too: only what ran again before them counts here.
			if ranAgain := rep.Existing - rep.Redelivery.Existing; run.records && (rep.StoreDown == 0 || ranAgain == 0) {
				t.Fatalf("Redis was not down while charges were sent, or no request ran again before the TTL (%d answers 503 store-unavailable, %d answered with their row)",
					rep.StoreDown, ranAgain)
			}
			// Every event came again at least once by webhook, every
			// entry of the stream was read again, and each event's first
			// delivery after the TTL met its ledger entry.
			if rd := rep.Redelivery; rd.Events != rep.Events.Expected || rd.Webhooks < rd.Events || rd.Entries == 0 || rd.Regrouped < rd.Entries || rd.Existing < rd.Events {
				t.Fatalf("after the TTL, not every event was delivered again by webhook and by the stream, or none met its ledger entry: %+v", rd)
			}
		})
	}
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
	if failures := rep.Failures(); len(failures) > 0 || rep.Duplicates != 0 || rep.Lost != 0 {
		t.Fatalf("the storm failed: %s", strings.Join(failures, "; "))
	}
	if rep.Retries == 0 || rep.Replays == 0 || rep.Drops == 0 || rep.Resets == 0 {
		t.Fatalf("the storm did not exercise retries, replays and faults: %+v", rep)
	}
	if rep.PairConflicts == 0 {
		t.Fatalf("no delayed request and its retry met at the server (no 409 between them): the delays did not overlap a retry with its original: %+v", rep)
	}
	if e := rep.Events; e.Sent != e.Expected || e.Duplicates() == 0 {
		t.Fatalf("the provider did not send every event, or no event twice: %+v", e)
	}
	if a := rep.Answers; a.Keys != int64(rep.Charges+rep.Refunds) || a.Resent != a.Keys {
		t.Fatalf("not every charge and refund was answered and sent again: %+v", a)
	}
	// The in-process demo's webhooks go through the proxy.
	if e := rep.Events; rep.Existing >= 0 && (e.Drops == 0 || e.Resets == 0 || e.Delays == 0 || e.Answers.Later == 0) {
		t.Fatalf("the storm exercised no dropped, reset or delayed webhook, or none answered twice: %+v", e)
	}
	return rep
}

// fakeDemo is a stand-in for the demo that is wrong in a chosen way, for
// the storm to catch. It serves the endpoints the storm reads: charges,
// their list, refunds, the balance, the ledger and the provider's counts.
// It settles each charge and refund as it makes it.
type fakeDemo struct {
	// idempotent replays a charge or refund whose key it has seen;
	// otherwise every request makes one, key or not.
	idempotent bool
	// record turns a charge's description and amount into the rows
	// written; nil writes the one row asked for.
	record func(description string, amount int64) []fakeRow
	// extraAuthorizations are provider authorizations no charge accounts for.
	extraAuthorizations int64
	// entries is how many ledger entries settle the charge or refund with
	// that index in its account (nil: one each).
	entries func(refund bool, index int) int

	mu       sync.Mutex
	keys     map[string]string // the id each key made
	rows     map[string][]fakeRow
	refunds  map[string][]fakeRow
	auths    map[string]int64
	settled  map[string][]map[string]any // the ledger, by account
	refunded map[string]int64
}

type fakeRow struct {
	Description string `json:"description"`
	Amount      int64  `json:"amount"`
}

func (f *fakeDemo) settle(acct, id string, amount int64, refund bool, index int) {
	n := 1
	if f.entries != nil {
		n = f.entries(refund, index)
	}
	for range n {
		f.settled[acct] = append(f.settled[acct], map[string]any{"id": len(f.settled[acct]) + 1, "settles": id, "amount": amount})
	}
}

func (f *fakeDemo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	acct := r.Header.Get("Authorization")
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys == nil {
		f.keys, f.rows, f.refunds, f.auths = map[string]string{}, map[string][]fakeRow{}, map[string][]fakeRow{}, map[string]int64{}
		f.settled, f.refunded = map[string][]map[string]any{}, map[string]int64{}
	}
	k := acct + "\x00" + r.URL.Path + "\x00" + r.Header.Get("Idempotency-Key")
	if prev, seen := f.keys[k]; r.Method == "POST" && f.idempotent && seen {
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q}`, prev)
		return
	}
	switch r.Method + " " + r.URL.Path {
	case "POST /v1/charges":
		var body fakeRow
		json.NewDecoder(r.Body).Decode(&body)
		f.auths[acct]++
		rows := []fakeRow{body}
		if f.record != nil {
			rows = f.record(body.Description, body.Amount)
		}
		for _, row := range rows {
			f.rows[acct] = append(f.rows[acct], row)
			i := len(f.rows[acct]) - 1
			f.settle(acct, fmt.Sprintf("ch_%d", i), row.Amount, false, i)
		}
		f.keys[k] = fmt.Sprintf("ch_%d", len(f.rows[acct])-1)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q}`, f.keys[k])
	case "POST /v1/refunds":
		var body struct{ Amount int64 }
		json.NewDecoder(r.Body).Decode(&body)
		f.refunds[acct] = append(f.refunds[acct], fakeRow{Amount: body.Amount})
		f.refunded[acct] += body.Amount
		i := len(f.refunds[acct]) - 1
		f.keys[k] = fmt.Sprintf("re_%d", i)
		f.settle(acct, f.keys[k], body.Amount, true, i)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q}`, f.keys[k])
	case "GET /v1/charges":
		data := []map[string]any{}
		for i, c := range f.rows[acct] {
			data = append(data, map[string]any{"id": fmt.Sprintf("ch_%d", i), "amount": c.Amount, "description": c.Description})
		}
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data, "has_more": false})
	case "GET /v1/settlements":
		var page []map[string]any
		if r.URL.Query().Get("starting_after") == "0" {
			page = f.settled[acct]
		}
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": page, "has_more": false})
	case "GET /v1/balance":
		var sum, settledCharged, settledRefunded int64
		for _, c := range f.rows[acct] {
			sum += c.Amount
		}
		for _, e := range f.settled[acct] {
			if strings.HasPrefix(e["settles"].(string), "re_") {
				settledRefunded += e["amount"].(int64)
			} else {
				settledCharged += e["amount"].(int64)
			}
		}
		json.NewEncoder(w).Encode(map[string]int64{"charges": int64(len(f.rows[acct])), "charged": sum,
			"refunds": int64(len(f.refunds[acct])), "refunded": f.refunded[acct],
			"settled_charged": settledCharged, "settled_refunded": settledRefunded, "settlements": int64(len(f.settled[acct]))})
	case "GET /debug/provider":
		n := f.auths[acct] + f.extraAuthorizations
		events := int64(len(f.rows[acct]) + len(f.refunds[acct]))
		json.NewEncoder(w).Encode(map[string]int64{"calls": n, "authorizations": n, "events": events, "deliveries": events})
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
	o.Target, o.Charges, o.Refunds, o.Concurrency, o.SettleTimeout = srv.URL, 200, 40, 10, time.Second
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

// TestStormChecksEverySettlement: a server that makes every charge and
// refund once, but applies one settlement event twice, or never applies
// another's, must fail the run, by the entries of each charge and refund
// (a double and a loss of the same amount leave the totals right).
func TestStormChecksEverySettlement(t *testing.T) {
	for name, c := range map[string]struct {
		entries func(refund bool, i int) int
		check   func(events) bool
	}{
		"a refund settled twice": {func(refund bool, i int) int { return map[bool]int{true: 2, false: 1}[refund && i == 3] },
			func(e events) bool { return e.Twice == 1 }},
		"a charge never settled": {func(refund bool, i int) int { return map[bool]int{true: 0, false: 1}[!refund && i == 150] },
			func(e events) bool { return e.Lost == 1 }},
	} {
		t.Run(name, func(t *testing.T) {
			rep := stormAgainst(t, &fakeDemo{idempotent: true, entries: c.entries})
			if rep.OK() || !c.check(rep.Events) {
				t.Fatalf("the storm passed a server that applied events wrong: %+v", rep.Events)
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
	cfg.ProviderLatency, cfg.ProviderFailureRate, cfg.SettleEvery = 5*time.Millisecond, 0.05, 100*time.Millisecond
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
	go func() { served <- a.Serve(ctx, app.Listeners{API: apiLn, Admin: adminLn}) }()
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

// requireRedisServer fails the test, saying why, when there is no
// redis-server to start: `make test` installs it.
func requireRedisServer(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("%v; `make test` installs it through scripts/redis-servers.sh", redisserver.ErrNotInstalled)
	}
}

// redisStorm is a short storm on the in-process demo with its records in
// a redis-server of the storm's own.
func redisStorm(t *testing.T, with func(*Options)) Report {
	t.Helper()
	requireRedisServer(t)
	rep := runStorm(t, shortStorm(func(o *Options) { o.OwnRedis = true; with(o) }))
	if !strings.HasPrefix(rep.Records, "redis://127.0.0.1:") {
		t.Fatalf("the demo did not keep its records in the storm's Redis: %+v", rep)
	}
	return rep
}

// TestStormRedis: with the records in Redis and the charges in SQLite, no
// charge is lost or made twice, and the provider takes each one's money
// once: while Redis runs, and while it loses every record again and again
// (FLUSHALL), which only the charges' unique constraint on their scoped
// idempotency key then keeps single, and the answers kept with the rows
// keep each retry's answer its first. (TestStormEvents kills and restarts
// the records' Redis mid-storm.)
func TestStormRedis(t *testing.T) {
	t.Run("steady", func(t *testing.T) {
		redisStorm(t, func(*Options) {})
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
