package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemadmin"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
)

// TestFindForgetRetry is the operator's incident on every durable store:
// a key whose record SQL or redis-cli cannot find (the store keeps its
// digest) is found by idemctl, forgotten, and its retry runs the handler
// anew. On SQLite idemctl runs as a built binary, in a process of its own,
// after the application's process let the file go.
func TestFindForgetRetry(t *testing.T) {
	t.Setenv(secretEnv, "test-secret")
	for _, tc := range targets {
		t.Run(tc.name, func(t *testing.T) {
			tg := tc.open(t)
			run := ctl
			if tg.name == "sqlite" {
				run = ctlBinary
			}
			a, scope, key := firstRequest(t, tg)
			if code, replayed := a.post(t, scope, key); code != 201 || !replayed || a.runs.Load() != 1 {
				t.Fatalf("retry before forget: %d replayed=%v runs=%d; want the replay", code, replayed, a.runs.Load())
			}
			if n := tg.total(t, key); n != 1 {
				t.Fatalf("the store holds %d records; want 1", n)
			}
			if n := tg.rawKeyCount(t, key); n != 0 {
				t.Fatalf("looking for the key in clear found %d records: the store should keep its digest only", n)
			}
			tg.close(t) // SQLite: the file is the application's until then

			code, out, errOut := run(t, "", append(append([]string{"get"}, tg.args...), "-scope", scope, "-key", key, "-json")...)
			if code != 0 {
				t.Fatalf("get: exit %d: %s", code, errOut)
			}
			if strings.Contains(out, key) || strings.Contains(out, scope) {
				t.Fatalf("get printed the key or scope without -show-key:\n%s", out)
			}
			var in idemadmin.Info
			if err := json.Unmarshal([]byte(out), &in); err != nil {
				t.Fatalf("get -json: %v\n%s", err, out)
			}
			if in.State != "completed" || in.Status != 201 || in.BodySize == 0 || in.Body != nil ||
				strings.Join(in.HeaderNames, ",") != "Content-Type,Location" || in.CompletedAt.IsZero() || in.Expired {
				t.Fatalf("get: %+v; want the completed 201 with its headers, without its body", in)
			}

			code, out, errOut = run(t, "", append(append([]string{"stats"}, tg.args...), "-json")...)
			if code != 0 {
				t.Fatalf("stats: exit %d: %s", code, errOut)
			}
			var st idemadmin.Stats
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatalf("stats -json: %v\n%s", err, out)
			}
			want := []idemadmin.ScopeCount{{Scope: idemadmin.ScopeLabel([]byte("test-secret"), idemadmin.ScopeDigest(scope)), Records: 1}}
			if st.Completed != 1 || st.InFlight != 0 || st.Expired != 0 || len(st.TopScopes) != 1 || st.TopScopes[0] != want[0] {
				t.Fatalf("stats: %+v; want one completed record of the scope %v", st, want)
			}

			// The key is read from standard input: it stays out of the
			// process list and the shell's history.
			code, out, errOut = run(t, scope+"\n"+key+"\n", append(append([]string{"forget"}, tg.args...), "-scope", "-", "-key", "-")...)
			if code != 0 || !strings.Contains(out, "forgotten") {
				t.Fatalf("forget: exit %d: %s%s", code, out, errOut)
			}
			if n := tg.total(t, key); n != 0 {
				t.Fatalf("after forget the store holds %d records", n)
			}
			code, _, _ = run(t, "", append(append([]string{"get"}, tg.args...), "-scope", scope, "-key", key)...)
			if code != exitNotFound {
				t.Fatalf("get after forget: exit %d; want %d (not found)", code, exitNotFound)
			}

			tg.reopen(t)
			a = newApp(tg.store)
			if code, replayed := a.post(t, scope, key); code != 201 || replayed || a.runs.Load() != 1 {
				t.Fatalf("retry after forget: %d replayed=%v runs=%d; want the handler run anew", code, replayed, a.runs.Load())
			}
		})
	}
}

// TestForgetInFlight: a record in flight is forgotten only with -force, and
// then its holder's completion is fenced: Complete fails with
// idem.ErrLockLost and writes nothing. On SQLite the record in flight is
// in the memory of the process holding the file: idemctl reaches it
// through that process's admin handler (-admin).
func TestForgetInFlight(t *testing.T) {
	for _, tc := range targets {
		t.Run(tc.name, func(t *testing.T) {
			tg := tc.open(t)
			args := tg.args
			if tg.name == "sqlite" {
				srv := httptest.NewServer(idemadmin.Handler(tg.store.(idemadmin.Store), idemadmin.HandlerOptions{}))
				defer srv.Close()
				args = []string{"-admin", srv.URL + "/idemadmin"}
			}
			ctx := t.Context()
			id := idem.ID{Scope: random("acct_"), Key: random("order-")}
			now := time.Now()
			_, outcome, err := tg.store.Acquire(ctx, idem.Acquire{ID: id, Fingerprint: idem.Fingerprint{1}, Token: "holder-1",
				Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
			if err != nil || outcome != idem.AcquireCreated {
				t.Fatalf("Acquire: %v %v", outcome, err)
			}
			ids := []string{"-scope", id.Scope, "-key", id.Key}

			code, out, errOut := ctl(t, "", append(append(append([]string{"get"}, args...), ids...), "-json")...)
			var in idemadmin.Info
			if code != 0 || json.Unmarshal([]byte(out), &in) != nil {
				t.Fatalf("get: exit %d: %s%s", code, out, errOut)
			}
			if in.State != "in-flight" || in.LeaseToken != "holder-1" || in.LeaseUntil.IsZero() {
				t.Fatalf("get: %+v; want the record in flight, held by holder-1", in)
			}

			code, out, errOut = ctl(t, "", append(append([]string{"stats"}, args...), "-json")...)
			var st idemadmin.Stats
			if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
				t.Fatalf("stats: exit %d: %s%s", code, out, errOut)
			}
			if st.InFlight != 1 || st.Completed != 0 || !st.OldestInFlight.Equal(now) || !st.OldestLeaseEnd.Equal(now.Add(time.Minute)) {
				t.Fatalf("stats: %+v; want the record in flight, taken at %v, its lease ending a minute later", st, now)
			}

			code, _, errOut = ctl(t, "", append(append([]string{"forget"}, args...), ids...)...)
			if code != exitFailed || !strings.Contains(errOut, "in flight") || !strings.Contains(errOut, "-force") {
				t.Fatalf("forget without -force: exit %d: %s; want a refusal naming -force", code, errOut)
			}
			if _, err := tg.store.Get(ctx, id); err != nil {
				t.Fatalf("the refused forget deleted the record: %v", err)
			}

			code, _, errOut = ctl(t, "", append(append([]string{"forget", "-force"}, args...), ids...)...)
			if code != 0 {
				t.Fatalf("forget -force: exit %d: %s", code, errOut)
			}
			err = tg.store.Complete(ctx, id, "holder-1", idem.Completion{Response: exchange.Response{Status: 201, Body: []byte("late")},
				CompletedAt: now, ExpiresAt: now.Add(time.Hour)})
			if !errors.Is(err, idem.ErrLockLost) {
				t.Fatalf("the forgotten holder's Complete: %v; want idem.ErrLockLost", err)
			}
			if _, err := tg.store.Get(ctx, id); !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("after the fenced Complete, Get: %v; want no record", err)
			}
		})
	}
}

// TestPurge: stats counts an expired record as waiting for the purge, and
// purge deletes it, on every durable store.
func TestPurge(t *testing.T) {
	for _, tc := range targets {
		t.Run(tc.name, func(t *testing.T) {
			tg := tc.open(t)
			ctx := t.Context()
			id := idem.ID{Scope: "acct", Key: random("old-")}
			then := time.Now().Add(-3 * time.Hour)
			if _, _, err := tg.store.Acquire(ctx, idem.Acquire{ID: id, Token: "t", Now: then,
				LeaseUntil: then.Add(time.Minute), ExpiresAt: then.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if err := tg.store.Complete(ctx, id, "t", idem.Completion{Response: exchange.Response{Status: 200},
				CompletedAt: then, ExpiresAt: then.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			tg.close(t)
			code, out, errOut := ctl(t, "", append(append([]string{"stats"}, tg.args...), "-json")...)
			var st idemadmin.Stats
			if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Expired != 1 {
				t.Fatalf("stats: exit %d, %+v: %s%s; want one expired record", code, st, out, errOut)
			}
			code, out, errOut = ctl(t, "", append(append([]string{"purge"}, tg.args...), "-json")...)
			var res idemadmin.PurgeResult
			if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Purged != 1 {
				t.Fatalf("purge: exit %d: %s%s; want 1 purged", code, out, errOut)
			}
			if n := tg.total(t, id.Key); n != 0 {
				t.Fatalf("after the purge the store holds %d records", n)
			}
			tg.reopen(t)
		})
	}
}

// TestSQLiteHeldByAnotherProcess: while a process holds the SQLite file,
// idemctl (another process) reads its completed records, says that records
// in flight are not visible, and refuses to forget or purge, naming the
// lock and the way through the process; through the process's admin
// handler the forget works, and the retry runs anew.
func TestSQLiteHeldByAnotherProcess(t *testing.T) {
	tg := sqliteTarget(t)
	a, scope, key := firstRequest(t, tg)
	ids := []string{"-scope", scope, "-key", key}

	code, out, errOut := ctlBinary(t, "", append(append([]string{"get"}, tg.args...), ids...)...)
	if code != 0 || !strings.Contains(out, "completed") || !strings.Contains(out, "201") {
		t.Fatalf("get on the held file: exit %d:\n%s%s", code, out, errOut)
	}
	code, out, errOut = ctlBinary(t, "", append([]string{"stats"}, tg.args...)...)
	if code != 0 || !strings.Contains(out, "completed          1") || !strings.Contains(out, "records in flight") {
		t.Fatalf("stats on the held file: exit %d:\n%s%s; want the count and a note on records in flight", code, out, errOut)
	}
	for _, op := range []string{"forget", "purge"} {
		args := append([]string{op}, tg.args...)
		if op == "forget" {
			args = append(args, ids...)
		}
		code, out, errOut = ctlBinary(t, "", args...)
		if code != exitFailed || !strings.Contains(errOut, "-idemkit.lock") || !strings.Contains(errOut, "-admin") ||
			strings.Contains(errOut, "panic") {
			t.Fatalf("%s on the held file: exit %d: %s%s; want a refusal naming the lock file and -admin", op, code, out, errOut)
		}
	}
	if code, replayed := a.post(t, scope, key); !replayed || code != 201 {
		t.Fatalf("the refused forget changed the record: %d replayed=%v", code, replayed)
	}

	srv := httptest.NewServer(idemadmin.Handler(tg.store.(*gormstore.Store), idemadmin.HandlerOptions{}))
	defer srv.Close()
	code, out, errOut = ctlBinary(t, "", append([]string{"forget", "-admin", srv.URL + "/idemadmin"}, ids...)...)
	if code != 0 {
		t.Fatalf("forget through the process: exit %d: %s%s", code, out, errOut)
	}
	if code, replayed := a.post(t, scope, key); code != 201 || replayed || a.runs.Load() != 2 {
		t.Fatalf("retry after forget: %d replayed=%v runs=%d; want the handler run anew", code, replayed, a.runs.Load())
	}
}

// Defect: SQLite took the file's path as a URI, so that "%25" in a name
// read as "%" and "%20" as a space: the application wrote "50% a b.db",
// and idemctl, given the file's name, found it, then failed to open it
// ("out of memory (14)"). Each opens the file named, and nothing else.
func TestSQLiteFileNameWithPercent(t *testing.T) {
	const name = "50%25 a%20b.db"
	tg := sqliteTargetNamed(t, name)
	_, scope, key := firstRequest(t, tg)
	ids := []string{"-scope", scope, "-key", key}
	code, out, errOut := ctlBinary(t, "", append(append([]string{"get"}, tg.args...), ids...)...)
	if code != 0 || !strings.Contains(out, "completed") {
		t.Fatalf("get: exit %d:\n%s%s", code, out, errOut)
	}
	tg.close(t)
	code, out, errOut = ctlBinary(t, "", append(append([]string{"forget"}, tg.args...), ids...)...)
	if code != 0 || !strings.Contains(out, "forgotten") {
		t.Fatalf("forget: exit %d:\n%s%s", code, out, errOut)
	}
	tg.reopen(t)
	a := newApp(tg.store)
	if code, replayed := a.post(t, scope, key); code != 201 || replayed || a.runs.Load() != 1 {
		t.Fatalf("retry after forget: %d replayed=%v runs=%d; want the handler run anew", code, replayed, a.runs.Load())
	}
	entries, err := os.ReadDir(filepath.Dir(tg.args[1]))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), name) {
			t.Errorf("a file of another name: %q", e.Name())
		}
	}
}

// TestBadInput: a bad command line or a store that cannot be reached is a
// clear error and a non-zero exit, never a panic, and no password is
// printed.
func TestBadInput(t *testing.T) {
	missing := t.TempDir() + "/missing.db"
	notSQLite := filepath.Join(t.TempDir(), "orders.csv")
	if err := os.WriteFile(notSQLite, []byte("order,amount\n1,100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no operation", nil, exitUsage, "name an operation"},
		{"unknown operation", []string{"show", "-store", "x.db"}, exitUsage, "unknown operation"},
		{"no store", []string{"get", "-key", "k"}, exitUsage, "-store"},
		{"both", []string{"get", "-store", "x.db", "-admin", "http://127.0.0.1:1/idemadmin", "-key", "k"}, exitUsage, "one of -store and -admin"},
		{"no key", []string{"get", "-store", missing}, exitUsage, "needs -key"},
		{"key from empty stdin", []string{"get", "-store", missing, "-key", "-"}, exitUsage, "standard input"},
		{"unsupported scheme", []string{"get", "-store", "oracle://scott:tiger@db/x", "-key", "k"}, exitFailed, "unsupported database"},
		{"missing SQLite file", []string{"get", "-store", missing, "-key", "k"}, exitFailed, "missing.db"},
		{"missing SQLite file, forget", []string{"forget", "-store", missing, "-key", "k"}, exitFailed, "missing.db"},
		{"not a SQLite file", []string{"get", "-store", notSQLite, "-key", "k"}, exitFailed, "orders.csv\" is not a valid SQLite database"},
		{"not a SQLite file, purge", []string{"purge", "-store", notSQLite}, exitFailed, "orders.csv\" is not a valid SQLite database"},
		{"unreachable PostgreSQL", []string{"get", "-store", "postgres://app:s3cretpw@127.0.0.1:1/none?connect_timeout=2", "-key", "k"}, exitFailed, "postgres://app@127.0.0.1:1/none"},
		{"unreachable MySQL", []string{"stats", "-store", "mysql://app:s3cretpw@127.0.0.1:1/none?timeout=2s"}, exitFailed, "mysql://app@127.0.0.1:1/none"},
		{"unreachable Redis", []string{"stats", "-store", "redis://:s3cretpw@127.0.0.1:1"}, exitFailed, "127.0.0.1:1"},
		{"bad Redis URL", []string{"stats", "-store", "redis://127.0.0.1:1/notadb"}, exitFailed, "-store"},
		{"unreachable admin", []string{"stats", "-admin", "http://127.0.0.1:1/idemadmin", "-timeout", "5s"}, exitFailed, "127.0.0.1:1"},
		{"bad admin URL", []string{"stats", "-admin", "127.0.0.1:1"}, exitFailed, "http://"},
		// Defect: each of these printed s3cretpw.
		{"password in the query", []string{"get", "-store", "postgres://app@127.0.0.1:1/none?password=s3cretpw&connect_timeout=2", "-key", "k"}, exitFailed, "password=xxxxx"},
		{"password in the query, forget", []string{"forget", "-store", "postgres://app@127.0.0.1:1/none?sslmode=disable&password=s3cretpw", "-key", "k"}, exitFailed, "postgres://app@127.0.0.1:1/none"},
		{"key=value DSN", []string{"get", "-store", "host=127.0.0.1 port=1 user=app password=s3cretpw dbname=none connect_timeout=2", "-key", "k"}, exitFailed, "password=xxxxx"},
		{"key=value DSN, forget", []string{"forget", "-store", "host=127.0.0.1 port=1 user=app password='s3cretpw' dbname=none", "-key", "k"}, exitFailed, "user=app"},
		{"Go MySQL DSN", []string{"get", "-store", "app:s3cretpw@tcp(127.0.0.1:1)/none?timeout=2s", "-key", "k"}, exitFailed, "app:xxxxx@tcp(127.0.0.1:1)/none"},
		{"Go MySQL DSN, forget", []string{"forget", "-store", "app:s3cretpw@tcp(127.0.0.1:1)/none", "-key", "k"}, exitFailed, "127.0.0.1:1"},
		{"malformed mysql URL", []string{"get", "-store", "mysql://app:s3cretpw@[::1/none", "-key", "k"}, exitFailed, "mysql://"},
		{"malformed mysql URL, forget", []string{"forget", "-store", "mysql://app:s3cretpw@127.0.0.1:port/none", "-key", "k"}, exitFailed, "mysql://"},
		{"malformed redis URL", []string{"get", "-store", "redis://:s3cretpw@[::1", "-key", "k"}, exitFailed, "redis://"},
		{"malformed redis URL, forget", []string{"forget", "-store", "redis://:s3cretpw@127.0.0.1:port/0", "-key", "k"}, exitFailed, "redis://"},
		{"admin URL with a password", []string{"get", "-admin", "http://op:s3cretpw@127.0.0.1:1/idemadmin", "-key", "k"}, exitFailed, "IDEMCTL_ADMIN_TOKEN"},
		{"admin URL with a password, forget", []string{"forget", "-admin", "http://op:s3cretpw@127.0.0.1:1/idemadmin", "-key", "k"}, exitFailed, "-admin"},
		{"password as an extra argument", []string{"get", "-key", "k", "postgres://app:s3cretpw@db/x"}, exitUsage, "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := ctlBinary(t, "", tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "panic") ||
				strings.Contains(errOut+out, "s3cretpw") {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit %d and an error containing %q, without the password", code, errOut, tc.code, tc.want)
			}
		})
	}
}

// Defect: a DSN could only be given on the command line, where the
// process list shows it. -store-file and IDEMCTL_STORE give it instead,
// and their passwords are not printed either.
func TestStoreFromFileOrEnvironment(t *testing.T) {
	tg := sqliteTarget(t)
	a := newApp(tg.store)
	if code, _ := a.post(t, "acct_1", "k-1"); code != 201 {
		t.Fatalf("first request: %d", code)
	}
	tg.close(t)
	file := t.TempDir() + "/dsn"
	if err := os.WriteFile(file, []byte(tg.args[1]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := ctlBinary(t, "", "get", "-store-file", file, "-scope", "acct_1", "-key", "k-1"); code != 0 || !strings.Contains(out, "completed") {
		t.Fatalf("get -store-file: exit %d:\n%s%s", code, out, errOut)
	}
	t.Setenv(storeEnv, tg.args[1])
	if code, out, errOut := ctlBinary(t, "", "get", "-scope", "acct_1", "-key", "k-1"); code != 0 || !strings.Contains(out, "completed") {
		t.Fatalf("get with %s: exit %d:\n%s%s", storeEnv, code, out, errOut)
	}
	if code, _, errOut := ctlBinary(t, "", "get", "-store-file", file, "-store", tg.args[1], "-key", "k"); code != exitUsage {
		t.Fatalf("-store and -store-file together: exit %d: %s", code, errOut)
	}
	t.Setenv(storeEnv, "postgres://app:s3cretpw@127.0.0.1:1/none?connect_timeout=2")
	if code, out, errOut := ctlBinary(t, "", "stats"); code != exitFailed || strings.Contains(out+errOut, "s3cretpw") ||
		!strings.Contains(errOut, "postgres://app@127.0.0.1:1/none") {
		t.Fatalf("stats with %s of an unreachable PostgreSQL: exit %d:\n%s%s", storeEnv, code, out, errOut)
	}
	if err := os.WriteFile(file, []byte("mysql://app:s3cretpw@[::1/none\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := ctlBinary(t, "", "stats", "-store-file", file); code != exitFailed || strings.Contains(out+errOut, "s3cretpw") {
		t.Fatalf("stats -store-file of a malformed URL: exit %d:\n%s%s", code, out, errOut)
	}
}

// Defect: -timeout was ignored while connecting to PostgreSQL or MySQL: a
// server that accepted and never answered (as a SIGSTOPped one does) held
// idemctl -timeout 2s for over 130 s. Every way to a store gives up at
// -timeout, with an error saying so, and no password.
func TestTimeoutWhileConnecting(t *testing.T) {
	addr := idemtest.SilentServer(t)
	for _, store := range []string{
		"postgres://app:s3cretpw@" + addr + "/payments?sslmode=disable",
		"mysql://app:s3cretpw@" + addr + "/payments",
		"app:s3cretpw@tcp(" + addr + ")/payments",
		"host=" + strings.Split(addr, ":")[0] + " port=" + strings.Split(addr, ":")[1] + " user=app password=s3cretpw dbname=payments sslmode=disable",
		"redis://:s3cretpw@" + addr + "/0",
	} {
		for _, op := range []string{"get", "forget"} {
			args := []string{op, "-store", store, "-timeout", "1s", "-key", "k"}
			code, out, errOut := ctlBinaryWithin(t, time.Minute, "", args...)
			if code != exitFailed || !strings.Contains(errOut, "deadline exceeded") || strings.Contains(out+errOut, "s3cretpw") {
				t.Errorf("%s on a server that never answers: exit %d:\n%s%s\nwant exit 1 and the deadline, without the password", op, code, out, errOut)
			}
		}
	}
	code, out, errOut := ctlBinaryWithin(t, time.Minute, "", "stats", "-admin", "http://"+addr+"/idemadmin", "-timeout", "1s")
	if code != exitFailed || !strings.Contains(errOut, "deadline exceeded") {
		t.Errorf("stats -admin on a server that never answers: exit %d:\n%s%s", code, out, errOut)
	}
}

// TestAdminToken: through -admin, idemctl sends the token of
// IDEMCTL_ADMIN_TOKEN or -admin-token-file; without it, an endpoint that
// has one refuses, and says what is missing.
func TestAdminToken(t *testing.T) {
	const token = "an-admin-token-0123456789"
	srv := httptest.NewServer(idemadmin.Handler(memstore.New(), idemadmin.HandlerOptions{Token: token}))
	defer srv.Close()
	code, _, errOut := ctlBinary(t, "", "stats", "-admin", srv.URL+"/idemadmin")
	if code != exitFailed || !strings.Contains(errOut, "token") {
		t.Fatalf("stats without the token: exit %d: %s", code, errOut)
	}
	file := t.TempDir() + "/token"
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := ctlBinary(t, "", "stats", "-admin", srv.URL+"/idemadmin", "-admin-token-file", file); code != 0 {
		t.Fatalf("stats -admin-token-file: exit %d: %s%s", code, out, errOut)
	}
	t.Setenv(adminTokenEnv, token)
	if code, out, errOut := ctlBinary(t, "", "stats", "-admin", srv.URL+"/idemadmin"); code != 0 || strings.Contains(out+errOut, token) {
		t.Fatalf("stats with %s: exit %d: %s%s", adminTokenEnv, code, out, errOut)
	}
}

// Defect: get -body wrote the stored bytes raw: a response body holding
// escape sequences acted on the operator's terminal (retitled it, cleared
// it, hid text behind a carriage return or reordered it). Text output
// escapes every byte a terminal acts on; -json gives the exact bytes.
func TestGetBodyIsSafeForATerminal(t *testing.T) {
	tg := sqliteTarget(t)
	hostile := []byte("{\"note\":\"\x1b]0;pwned\x07\x1b[2J\x1b[31mred\rhidden\x7f\xff\xc2\x9b\u202eevil\tok\"}\n")
	id := idem.ID{Scope: "acct", Key: "k-body"}
	now := time.Now()
	if _, _, err := tg.store.Acquire(t.Context(), idem.Acquire{ID: id, Token: "t", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := tg.store.Complete(t.Context(), id, "t", idem.Completion{Response: exchange.Response{Status: 200, Body: hostile},
		CompletedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	tg.close(t)
	code, out, errOut := ctl(t, "", append(append([]string{"get"}, tg.args...), "-scope", "acct", "-key", "k-body", "-body")...)
	if code != 0 {
		t.Fatalf("get -body: exit %d: %s", code, errOut)
	}
	for i, r := range out {
		if r == utf8.RuneError || r < 0x20 && r != '\n' && r != '\t' || r >= 0x7f && r <= 0x9f || unicode.Is(unicode.Bidi_Control, r) {
			t.Fatalf("get -body printed %U at byte %d:\n%q", r, i, out)
		}
	}
	for _, want := range []string{`\x1b]0;pwned\x07`, `\x1b[2J`, `red\x0dhidden\x7f\xff\u009b\u202eevil` + "\tok", "-json gives the body exactly"} {
		if !strings.Contains(out, want) {
			t.Errorf("get -body does not show %q:\n%s", want, out)
		}
	}
	code, out, errOut = ctl(t, "", append(append([]string{"get"}, tg.args...), "-scope", "acct", "-key", "k-body", "-body", "-json")...)
	var in idemadmin.Info
	if code != 0 || json.Unmarshal([]byte(out), &in) != nil || !bytes.Equal(in.Body, hostile) {
		t.Fatalf("get -body -json: exit %d, body %q: %s; want the exact bytes", code, in.Body, errOut)
	}
}

// TestKeyInTheHeadersForm: -key takes the key bare, as idemkit keeps it,
// or as the Idempotency-Key header carries it, an RFC 9651 string, which
// idemctl decodes as the server does (escapes, parameters ignored); a key
// that itself looks like a quoted string is reached by its header form.
// Before, the header's form found nothing.
func TestKeyInTheHeadersForm(t *testing.T) {
	tg := sqliteTarget(t)
	for _, key := range []string{"order-7", `say "hi"`, `"quoted"`} {
		complete(t, tg.store, idem.ID{Scope: "acct_42", Key: key})
	}
	get := func(stdin string, key string) (int, string) {
		code, out, errOut := ctl(t, stdin, append(append([]string{"get"}, tg.args...), "-scope", "acct_42", "-key", key, "-show-key")...)
		return code, out + errOut
	}
	for _, tc := range []struct{ arg, key string }{
		{"order-7", "order-7"},
		{`"order-7"`, "order-7"},
		{`"order-7";v=1`, "order-7"},
		{`"say \"hi\""`, `say "hi"`},
		{`"\"quoted\""`, `"quoted"`},
	} {
		code, out := get("", tc.arg)
		if code != 0 || !strings.Contains(out, fmt.Sprintf("key          %q", tc.key)) {
			t.Errorf("-key %s: exit %d, want the record of %q:\n%s", tc.arg, code, tc.key, out)
		}
	}
	code, out, errOut := ctl(t, "\"order-7\"\n", append(append([]string{"get"}, tg.args...), "-scope", "acct_42", "-key", "-", "-show-key")...)
	if code != 0 || !strings.Contains(out, `key          "order-7"`) {
		t.Errorf("-key - reading the header's form: exit %d:\n%s%s", code, out, errOut)
	}
	code, out, errOut = ctl(t, "", append(append([]string{"forget"}, tg.args...), "-scope", "acct_42", "-key", `"order-7"`)...)
	if code != 0 {
		t.Fatalf("forget -key '\"order-7\"': exit %d:\n%s%s", code, out, errOut)
	}
	if code, out := get("", "order-7"); code != exitNotFound {
		t.Errorf("after forgetting the header's form, get of the bare key: exit %d, want %d:\n%s", code, exitNotFound, out)
	}
}
