package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/internal/testservers"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	"github.com/idemkit/idemkit/stores/gorm/opendb"
	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
	redisstore "github.com/idemkit/idemkit/stores/redis"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

func random(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// target is a store under test, and how idemctl names it.
type target struct {
	name string
	// store is the store the application's Engine uses; reopen replaces it
	// (on SQLite, after close let another process take the file).
	store idem.Store
	// args name the store on idemctl's command line.
	args []string
	// rawKeyCount counts the records found by the key in clear, as SQL or
	// redis-cli would look for it; total counts all of the test's records.
	rawKeyCount, total func(t *testing.T, key string) int
	// close closes store; reopen opens it again.
	close, reopen func(t *testing.T)
}

// targets are the durable stores idemctl works on.
var targets = []struct {
	name string
	open func(t *testing.T) *target
}{
	{"sqlite", sqliteTarget},
	{"postgres", func(t *testing.T) *target {
		return sqlTarget(t, "postgres", testservers.Require(t, testservers.PostgresDSN))
	}},
	{"mariadb", func(t *testing.T) *target {
		return sqlTarget(t, "mariadb", testservers.MySQLURL(t, testservers.Require(t, testservers.MySQLDSN)))
	}},
	{"redis", func(t *testing.T) *target { return redisTarget(t, false) }},
	{"redis-cluster", func(t *testing.T) *target { return redisTarget(t, true) }},
}

var quiet = &gorm.Config{Logger: logger.Discard}

func sqliteTarget(t *testing.T) *target { return sqliteTargetNamed(t, "records.db") }

// sqliteTargetNamed is sqliteTarget on a file of the given name, in a
// directory of the test's own.
func sqliteTargetNamed(t *testing.T, name string) *target {
	path := filepath.Join(t.TempDir(), name)
	tg := &target{name: "sqlite", args: []string{"-store", path}}
	var db *gorm.DB
	tg.reopen = func(t *testing.T) {
		var err error
		if db, err = sqlitedb.Open(path, quiet); err != nil {
			t.Fatal(err)
		}
		s, err := gormstore.New(db, gormstore.WithPurgeInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AutoMigrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		tg.store = s
	}
	tg.close = func(t *testing.T) {
		tg.store.(*gormstore.Store).Close()
		sqlDB, _ := db.DB()
		sqlDB.Close()
	}
	count := func(t *testing.T, where string, args ...any) int {
		ro, err := sqlitedb.OpenReadOnly(path, quiet)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { sqlDB, _ := ro.DB(); sqlDB.Close() }()
		var n int
		if err := ro.Raw("SELECT count(*) FROM idem_records"+where, args...).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	tg.rawKeyCount = func(t *testing.T, key string) int { return count(t, " WHERE key_hash = ?", []byte(key)) }
	tg.total = func(t *testing.T, _ string) int { return count(t, "") }
	tg.reopen(t)
	t.Cleanup(func() { tg.close(t) })
	return tg
}

func sqlTarget(t *testing.T, name, dsn string) *target {
	table := random("idemctl_")
	db, err := opendb.Open(dsn, quiet)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	tg := &target{name: name, args: []string{"-store", dsn, "-table", table}}
	tg.reopen = func(t *testing.T) {
		s, err := gormstore.New(db, gormstore.WithTable(table), gormstore.WithPurgeInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.AutoMigrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		tg.store = s
	}
	tg.close = func(*testing.T) { tg.store.(*gormstore.Store).Close() }
	count := func(t *testing.T, where string, args ...any) int {
		var n int
		if err := db.Raw("SELECT count(*) FROM "+table+where, args...).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}
	tg.rawKeyCount = func(t *testing.T, key string) int { return count(t, " WHERE key_hash = ?", []byte(key)) }
	tg.total = func(t *testing.T, _ string) int { return count(t, "") }
	tg.reopen(t)
	t.Cleanup(func() {
		tg.close(t)
		db.Exec("DROP TABLE " + table)
		sqlDB.Close()
	})
	return tg
}

func redisTarget(t *testing.T, cluster bool) *target {
	prefix := random("idemctl:") + ":"
	var c redis.UniversalClient
	name, addr := "redis", ""
	if cluster {
		addrs := strings.Split(testservers.Require(t, testservers.RedisClusterAddrs), ",")
		name, addr = "redis-cluster", addrs[0]
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	} else {
		addr = testservers.Require(t, testservers.RedisAddr)
		c = redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	}
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	// scan lists the names matching pattern on every master, as redis-cli
	// --scan would.
	scan := func(t *testing.T, pattern string) int {
		var mu sync.Mutex
		n := 0
		each := func(ctx context.Context, node *redis.Client) error {
			keys, err := node.Keys(ctx, pattern).Result()
			mu.Lock()
			n += len(keys)
			mu.Unlock()
			return err
		}
		var err error
		if cc, ok := c.(*redis.ClusterClient); ok {
			err = cc.ForEachMaster(t.Context(), each)
		} else {
			err = each(t.Context(), c.(*redis.Client))
		}
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	tg := &target{name: name, store: s, args: []string{"-store", "redis://" + addr, "-prefix", prefix},
		rawKeyCount: func(t *testing.T, key string) int { return scan(t, "*"+key+"*") },
		total:       func(t *testing.T, _ string) int { return scan(t, prefix+"*") },
		close:       func(*testing.T) {},
		reopen:      func(*testing.T) {},
	}
	return tg
}

// app is an application on a store: POST / creates an order, counting
// its runs, behind idemkit's middleware, its scope the Account header.
type app struct {
	runs atomic.Int32
	h    http.Handler
}

func newApp(store idem.Store) *app {
	a := &app{}
	engine := idem.New(idem.Config{Store: store})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := a.runs.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/orders/1")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"order":"ord_1","run":` + string(rune('0'+n)) + `}`))
	})
	a.h = idemhttp.Middleware(engine, idemhttp.WithScope(func(r *http.Request) string { return r.Header.Get("Account") }))(handler)
	return a
}

// firstRequest sends the order of a new key to a new app on tg's store,
// and returns the app, the key's scope and the key.
func firstRequest(t *testing.T, tg *target) (a *app, scope, key string) {
	t.Helper()
	scope, key = random("acct_"), random("order-")
	a = newApp(tg.store)
	if code, _ := a.post(t, scope, key); code != 201 {
		t.Fatalf("first request: %d", code)
	}
	return a, scope, key
}

// post sends the order with key as scope's and returns the status and
// whether it was replayed.
func (a *app) post(t *testing.T, scope, key string) (int, bool) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"amount":100}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Account", scope)
	rec := httptest.NewRecorder()
	a.h.ServeHTTP(rec, req)
	return rec.Code, rec.Header().Get("Idempotent-Replayed") == "true"
}

// ctl runs idemctl in the test's process.
func ctl(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

var built struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// ctlBinary runs the built idemctl, as an operator does, in a process of
// its own.
func ctlBinary(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return ctlBinaryWithin(t, 2*time.Minute, stdin, args...)
}

// ctlBinaryWithin is ctlBinary, killing idemctl if it runs longer than
// limit: it then fails the test.
func ctlBinaryWithin(t *testing.T, limit time.Duration, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "idemctl-bin")
		if err != nil {
			built.err = err
			return
		}
		built.path = filepath.Join(dir, "idemctl")
		built.out, built.err = exec.Command("go", "build", "-o", built.path, ".").CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("go build: %v\n%s", built.err, built.out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, built.path, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil && t.Context().Err() == nil {
		t.Fatalf("idemctl %q still ran after %v; it was killed:\n%s%s", args, limit, out.String(), errOut.String())
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errOut.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errOut.String()
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.path != "" {
		os.RemoveAll(filepath.Dir(built.path))
	}
	os.Exit(code)
}
