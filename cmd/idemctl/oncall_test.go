package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemadmin"
	"github.com/idemkit/idemkit/core/memstore"
	"github.com/idemkit/idemkit/internal/testservers"
	redisstore "github.com/idemkit/idemkit/stores/redis"
	"github.com/redis/go-redis/v9"
)

// complete records a completed request of id in s.
func complete(t *testing.T, s idem.Store, id idem.ID) {
	t.Helper()
	now := time.Now()
	if _, _, err := s.Acquire(t.Context(), idem.Acquire{ID: id, Token: "t", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(t.Context(), id, "t", idem.Completion{Response: exchange.Response{Status: 201}, CompletedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
}

// Defect: "no record" where one existed, with no hint: the key as the
// header carries it ("order-7"), the demo's Redis without its prefix,
// another Redis database, a key in flight on a SQLite file a process holds.
// The message says what was looked up (digests, table or key, database)
// and what to try, and names no key.
func TestNoRecordSaysWhatWasLookedUp(t *testing.T) {
	t.Run("sqlite, a key in flight", func(t *testing.T) {
		tg := sqliteTarget(t)
		complete(t, tg.store, idem.ID{Scope: "acct_42", Key: "order-7"})
		code, out, errOut := ctl(t, "", append(append([]string{"get"}, tg.args...), "-scope", "acct_42", "-key", "order-8")...)
		if code != exitNotFound || !strings.Contains(errOut, "looked up: table idem_records, scope_hash ") ||
			!strings.Contains(errOut, "in sqlite:") ||
			!strings.Contains(errOut, "memory of the process that holds the file") || strings.Contains(out+errOut, "order-8") {
			t.Fatalf("get of a key not recorded: exit %d:\n%s%s", code, out, errOut)
		}
		code, out, errOut = ctl(t, "", append(append([]string{"get"}, tg.args...), "-scope", "acct_42", "-key", "order-8", "-json")...)
		var e jsonError
		if code != exitNotFound || json.Unmarshal([]byte(out), &e) != nil || e.Kind != "not-found" || e.Exit != exitNotFound ||
			!strings.HasPrefix(e.LookedUp, "table idem_records") || len(e.Hints) == 0 {
			t.Fatalf("get -json of a key not recorded: exit %d, %+v:\n%s%s", code, e, out, errOut)
		}
	})
	t.Run("redis, the demo's prefix and another database", func(t *testing.T) {
		addr := testservers.Require(t, testservers.RedisAddr)
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer c.Close()
		prefix := random("payments:idem:") + ":"
		s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		id := idem.ID{Scope: "acct_42", Key: random("order-")}
		complete(t, s, id)
		defer s.Forget(context.Background(), id, true)
		code, out, errOut := ctl(t, "", "get", "-store", "redis://"+addr, "-scope", id.Scope, "-key", id.Key)
		if code != exitNotFound || !strings.Contains(errOut, "looked up: key idem:{") || !strings.Contains(errOut, "in database 0 of redis://"+addr) ||
			!strings.Contains(errOut, "-prefix") || !strings.Contains(errOut, "payments:idem:") || strings.Contains(out+errOut, id.Key) {
			t.Fatalf("get without the prefix: exit %d:\n%s%s", code, out, errOut)
		}
		code, out, errOut = ctl(t, "", "get", "-store", "redis://"+addr+"/3", "-prefix", prefix, "-scope", id.Scope, "-key", id.Key)
		if code != exitNotFound || !strings.Contains(errOut, "in database 3 of") {
			t.Fatalf("get in another database: exit %d:\n%s%s", code, out, errOut)
		}
		if code, out, errOut := ctl(t, "", "get", "-store", "redis://"+addr, "-prefix", prefix, "-scope", id.Scope, "-key", id.Key); code != 0 {
			t.Fatalf("get with the prefix: exit %d:\n%s%s", code, out, errOut)
		}
	})
	t.Run("sqlite held by a process, a key in flight", func(t *testing.T) {
		tg := sqliteTarget(t)
		id := idem.ID{Scope: "acct_42", Key: "order-8"}
		now := time.Now()
		if _, _, err := tg.store.Acquire(t.Context(), idem.Acquire{ID: id, Token: "t", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := ctlBinary(t, "", append(append([]string{"get"}, tg.args...), "-scope", id.Scope, "-key", id.Key)...)
		if code != exitNotFound || !strings.Contains(errOut, "-admin") || !strings.Contains(errOut, "memory of the process") {
			t.Fatalf("get of a key in flight on a held file: exit %d:\n%s%s", code, out, errOut)
		}
		srv := httptest.NewServer(idemadmin.Handler(tg.store.(idemadmin.Store), idemadmin.HandlerOptions{}))
		defer srv.Close()
		code, out, errOut = ctlBinary(t, "", "get", "-admin", srv.URL+"/idemadmin", "-scope", id.Scope, "-key", "order-9")
		if code != exitNotFound || !strings.Contains(errOut, "looked up: table idem_records, scope_hash") || !strings.Contains(errOut, "through "+srv.URL) {
			t.Fatalf("get through -admin of a missing key: exit %d:\n%s%s", code, out, errOut)
		}
	})
}

// Defect: lines on standard input past those -scope - and -key - read
// were ignored: given three keys, idemctl forgot one and left two. They
// are an error now, and nothing is done.
func TestStdinExtraLines(t *testing.T) {
	tg := sqliteTarget(t)
	for _, k := range []string{"k-1", "k-2", "k-3"} {
		complete(t, tg.store, idem.ID{Scope: "acct", Key: k})
	}
	tg.close(t)
	code, out, errOut := ctl(t, "k-1\nk-2\nk-3\n", append(append([]string{"forget"}, tg.args...), "-scope", "acct", "-key", "-")...)
	if code != exitUsage || !strings.Contains(errOut, "more lines") || strings.Contains(out, "forgotten") {
		t.Fatalf("forget of three keys on stdin: exit %d:\n%s%s", code, out, errOut)
	}
	code, _, errOut = ctl(t, "acct\nk-1\nextra\n", append(append([]string{"forget"}, tg.args...), "-scope", "-", "-key", "-")...)
	if code != exitUsage || !strings.Contains(errOut, "more lines") {
		t.Fatalf("forget with a line past scope and key: exit %d: %s", code, errOut)
	}
	if n := tg.total(t, ""); n != 3 {
		t.Fatalf("%d records left of 3: a refused forget deleted", n)
	}
	if code, out, errOut := ctl(t, "acct\nk-1\n\n", append(append([]string{"forget"}, tg.args...), "-scope", "-", "-key", "-")...); code != 0 {
		t.Fatalf("forget with a blank line after scope and key: exit %d:\n%s%s", code, out, errOut)
	}
}

// blockingPurge is a store whose Purge deletes what it deletes, then holds
// its answer until released: a purge of a long backlog whose answer comes
// after idemctl's -timeout.
type blockingPurge struct {
	idemadmin.Store
	release chan struct{}
}

func (s blockingPurge) Purge(ctx context.Context, now time.Time, limit int) (int, error) {
	n, err := s.Store.Purge(ctx, now, limit)
	<-s.release
	return n, err
}

// Defect: a purge through -admin that timed out reported "0 records" while
// the process purged them. The count is then unknown, and idemctl says so.
func TestPurgeThroughAdminTimeout(t *testing.T) {
	store := memstore.New(memstore.WithPurgeInterval(0))
	defer store.Close()
	then := time.Now().Add(-3 * time.Hour)
	for _, k := range []string{"a", "b"} {
		id := idem.ID{Key: k}
		store.Acquire(t.Context(), idem.Acquire{ID: id, Token: "t", Now: then, LeaseUntil: then.Add(time.Minute), ExpiresAt: then.Add(time.Hour)})
		store.Complete(t.Context(), id, "t", idem.Completion{Response: exchange.Response{Status: 200}, CompletedAt: then, ExpiresAt: then.Add(time.Hour)})
	}
	release := make(chan struct{})
	srv := httptest.NewServer(idemadmin.Handler(blockingPurge{store, release}, idemadmin.HandlerOptions{}))
	defer srv.Close()
	defer close(release)
	code, out, errOut := ctl(t, "", "purge", "-admin", srv.URL+"/idemadmin", "-timeout", "300ms", "-json")
	var e jsonError
	if code != exitFailed || json.Unmarshal([]byte(out), &e) != nil || e.Purged != nil || strings.Contains(errOut, "0 records") ||
		!strings.Contains(errOut, "may have purged") {
		t.Fatalf("purge whose answer came too late: exit %d, %+v:\n%s%s\nwant the count unknown, not 0", code, e, out, errOut)
	}
	if store.Len() != 0 {
		t.Fatalf("%d records left: the process did not purge", store.Len())
	}
}

// Defect: flags that do not apply to an operation were taken silently,
// with -json an error left stdout empty, and -h exited 2.
func TestCommandLine(t *testing.T) {
	missing := t.TempDir() + "/missing.db"
	for _, args := range [][]string{
		{"stats", "-store", missing, "-force"},
		{"get", "-store", missing, "-key", "k", "-batch", "5"},
		{"purge", "-store", missing, "-body"},
		{"forget", "-store", missing, "-key", "k", "-top", "3"},
		{"stats", "-store", missing, "-show-key"},
		{"get", "-store", "redis://127.0.0.1:1", "-key", "k", "-table", "t"},
		{"get", "-store", missing, "-key", "k", "-prefix", "p:"},
	} {
		code, out, errOut := ctl(t, "", args...)
		if code != exitUsage || !strings.Contains(errOut, "appl") {
			t.Errorf("idemctl %q: exit %d:\n%s%s\nwant exit 2, the flag refused", args, code, out, errOut)
		}
	}
	for _, args := range [][]string{
		{"get", "-json"}, // usage
		{"get", "-json", "-store", missing, "-key", "k"}, // failed
		{"stats", "-store", missing, "-nope", "-json"},   // unknown flag
	} {
		code, out, errOut := ctl(t, "", args...)
		var e jsonError
		if err := json.Unmarshal([]byte(out), &e); err != nil || e.Error == "" || e.Exit != code || code == 0 {
			t.Errorf("idemctl %q: exit %d, stdout %q (%v): want a JSON error object:\n%s", args, code, out, err, errOut)
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"get", "-h"}, {"purge", "-store", "x", "-help"}} {
		code, out, errOut := ctl(t, "", args...)
		if code != exitOK || !strings.Contains(out, "usage: idemctl") || errOut != "" {
			t.Errorf("idemctl %q: exit %d, stdout %q, stderr %q: want the usage and exit 0", args, code, out, errOut)
		}
	}
	if code, out, _ := ctl(t, "", "forget", "-h"); code != 0 || !strings.Contains(out, "-force") || strings.Contains(out, "-batch") {
		t.Errorf("forget -h: exit %d, want its flags only:\n%s", code, out)
	}
}

// Defect: on SQLite, get of a key in flight showed a lease until 2126: the
// store takes no leases (one process holds its keys until their handlers
// end), and idemctl now says so, in text and JSON, and so does stats.
func TestSQLiteSaysItTakesNoLease(t *testing.T) {
	tg := sqliteTarget(t)
	engine := idem.New(idem.Config{Store: tg.store})
	d := engine.Adapter().Begin(t.Context(), exchange.Request{Method: "POST", Path: "/orders", Scope: "acct_42", KeyLines: []string{`"order-7"`},
		Body: []byte(`{}`)})
	if d.Action != exchange.Run {
		t.Fatalf("Begin: %v", d.Action)
	}
	defer d.Lock.Finish(context.Background(), 201, nil)
	srv := httptest.NewServer(idemadmin.Handler(tg.store.(idemadmin.Store), idemadmin.HandlerOptions{}))
	defer srv.Close()
	admin := []string{"-admin", srv.URL + "/idemadmin"}
	code, out, errOut := ctl(t, "", append([]string{"get", "-scope", "acct_42", "-key", "order-7"}, admin...)...)
	if code != 0 || !strings.Contains(out, "lease until  none: this store takes no leases") {
		t.Fatalf("get of a key in flight on SQLite: exit %d:\n%s%s", code, out, errOut)
	}
	code, out, _ = ctl(t, "", append([]string{"get", "-scope", "acct_42", "-key", "order-7", "-json"}, admin...)...)
	var in idemadmin.Info
	if code != 0 || json.Unmarshal([]byte(out), &in) != nil || !in.NoLease || !in.LeaseUntil.IsZero() || in.Expired {
		t.Fatalf("get -json: exit %d:\n%s", code, out)
	}
	code, out, errOut = ctl(t, "", append([]string{"stats"}, admin...)...)
	if code != 0 || !strings.Contains(out, "oldest lease end   none: this store takes no leases") {
		t.Fatalf("stats: exit %d:\n%s%s", code, out, errOut)
	}
}

// Defect: stats showed the largest scopes by their SHA-256, and a
// guessable account id was recovered in 43 guesses. They are shown by a
// keyed hash (idemadmin.ScopeLabel under IDEMCTL_SECRET, or a random
// secret), never by digest; the README's shell recipe gives the same.
func TestStatsScopesAreKeyed(t *testing.T) {
	tg := sqliteTarget(t)
	complete(t, tg.store, idem.ID{Scope: "acct_42", Key: "order-7"})
	tg.close(t)
	digest := idemadmin.ScopeDigest("acct_42")
	code, out, errOut := ctl(t, "", append([]string{"stats"}, tg.args...)...)
	if code != 0 || strings.Contains(out, digest) || strings.Contains(out, digest[:16]) || !strings.Contains(out, "keyed hash") {
		t.Fatalf("stats: exit %d:\n%s%s\nwant the scope by a keyed hash, never its digest %s", code, out, errOut, digest)
	}
	const secret = "fleet-secret"
	t.Setenv(secretEnv, secret)
	code, out, _ = ctl(t, "", append([]string{"stats", "-json"}, tg.args...)...)
	var st idemadmin.Stats
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.TopScopes) != 1 ||
		st.TopScopes[0].Scope != idemadmin.ScopeLabel([]byte(secret), digest) || strings.Contains(out, digest) {
		t.Fatalf("stats -json with %s: exit %d:\n%s", secretEnv, code, out)
	}
	recipe := readmeRecipe(t)
	cmd := exec.Command("bash", "-c", recipe)
	cmd.Env = append(os.Environ(), "SCOPE=acct_42", "SECRET="+secret)
	got, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(got)) != st.TopScopes[0].Scope {
		t.Fatalf("the README's recipe %q gave %q (%v), stats shows %s", recipe, got, err, st.TopScopes[0].Scope)
	}
}

// readmeRecipe returns the shell line of the README that computes a
// scope's label: the line after "<!-- scope-label -->" and its fence.
func readmeRecipe(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("<!-- scope-label -->\\s*\n\\s*```console\n\\s*\\$ (.*)\n").FindStringSubmatch(string(src))
	if m == nil {
		t.Fatal("README.md has no <!-- scope-label --> console block")
	}
	return m[1]
}
