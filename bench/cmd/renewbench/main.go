// Command renewbench measures renewal capacity: how many handlers, each
// holding its key for several leases, one Engine keeps on a store without
// any of them losing its lease.
//
//	go run ./bench/cmd/renewbench -stores memory,bare -ladder 1000,5000,10000,20000
//
// For each store and each rung of the ladder it takes that many keys on a
// fresh Engine (Lease -lease, RenewEvery a third of it), holds them all for
// -hold, then ends each with Finish, and reports how many handlers were
// told their lease was lost (their context cancelled) and how many
// completions the store refused for a lost lock. A store's capacity is the
// highest rung with none of either. It stops climbing a store's ladder at
// the first rung that loses a lease.
//
// Stores: memory (the memory store), bare (the memory store behind only the
// methods of idem.Store, as a store without batch renewal), sqlite (a
// temporary file), postgres and mysql (the DSNs in IDEMKIT_TEST_POSTGRES_DSN
// and IDEMKIT_TEST_MYSQL_DSN), redis and redis-cluster (the addresses in
// IDEMKIT_TEST_REDIS_ADDR and IDEMKIT_TEST_REDIS_CLUSTER_ADDRS).
// `make bench-renew` starts those servers, as the tests do, and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/memstore"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
	redisstore "github.com/idemkit/idemkit/stores/redis"
)

func main() {
	storeList := flag.String("stores", "memory,bare,sqlite,postgres,mysql,redis,redis-cluster", "stores to measure, comma-separated")
	ladder := flag.String("ladder", "1000,2000,5000,10000,20000", "numbers of handlers to hold, in increasing order")
	lease := flag.Duration("lease", time.Second, "the Engine's Lease (RenewEvery is a third of it)")
	hold := flag.Duration("hold", 0, "how long the handlers hold their keys (default 3 leases)")
	pool := flag.Int("pool", 20, "connection pool size for postgres, mysql and redis")
	timeout := flag.Duration("timeout", 20*time.Minute, "bound on the whole run")
	flag.Parse()
	if *hold == 0 {
		*hold = 3 * *lease
	}
	var rungs []int
	for _, f := range strings.Split(*ladder, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			fatalf("-ladder: %q is not a positive number", f)
		}
		rungs = append(rungs, n)
	}
	deadline := time.Now().Add(*timeout)
	// The MySQL driver logs every connection a renewal's deadline cuts off.
	_ = mysqldriver.SetLogger(log.New(io.Discard, "", 0))

	const row = "%-14s %9v %12v %10v %11v %20v %14v\n"
	fmt.Printf(row, "store", "handlers", "renewals/s", "taken in", "lease lost", "completions refused", "renewal calls")
	capacity := map[string]int{}
	for _, name := range strings.Split(*storeList, ",") {
		name = strings.TrimSpace(name)
		for _, n := range rungs {
			if time.Now().After(deadline) {
				fatalf("-timeout reached")
			}
			store, closeStore, err := open(name, *pool)
			if err != nil {
				fatalf("%s: %v", name, err)
			}
			r := run(store, n, *lease, *hold)
			closeStore()
			fmt.Printf(row, name, n, rate(n, *lease), r.taken.Round(time.Millisecond), r.lost, r.refused, r.renewals)
			if r.lost > 0 || r.refused > 0 || r.err != nil {
				if r.err != nil {
					fmt.Fprintf(os.Stderr, "%s, %d handlers: %v\n", name, n, r.err)
				}
				break
			}
			capacity[name] = n
		}
	}
	fmt.Println()
	for _, name := range strings.Split(*storeList, ",") {
		name = strings.TrimSpace(name)
		n := capacity[name]
		fmt.Printf("%s: %d handlers held for %v without a lost lease (lease %v, %d renewals/s); "+
			"at the same rate, %d handlers with the default lease of %v\n",
			name, n, *hold, *lease, rate(n, *lease), n*int(defaultLease / *lease), defaultLease)
	}
}

// defaultLease is the Engine's default Lease.
var defaultLease = idem.New(idem.Config{Store: memstore.New(memstore.WithPurgeInterval(0))}).Config().Lease

// rate is how many leases a second n handlers need renewed, with
// RenewEvery the default third of lease.
func rate(n int, lease time.Duration) int {
	return int(float64(n) / (lease / 3).Seconds())
}

type result struct {
	taken    time.Duration // to take every key
	lost     int           // handlers told their lease was lost
	refused  int           // Finish refused with a lost lock
	renewals int64         // Renew and RenewBatch calls made
	err      error
}

// run takes n keys on a fresh Engine over store, holds them for hold and
// finishes them.
func run(store idem.Store, n int, lease, hold time.Duration) result {
	counted := countRenewals(store)
	var renewErrs atomic.Int64
	var firstErr atomic.Value
	e := idem.New(idem.Config{Store: counted, Lease: lease, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		OnEvent: func(_ context.Context, ev idemevent.Event) {
			if ev.Kind == idemevent.RenewError {
				renewErrs.Add(1)
				firstErr.CompareAndSwap(nil, ev.Err.Error())
			}
		}})
	defer func() {
		if errs := renewErrs.Load(); errs > 0 {
			fmt.Fprintf(os.Stderr, "  %d handlers: %d failed renewals, the first: %v\n", n, errs, firstErr.Load())
		}
	}()
	ctx := context.Background()
	locks := make([]exchange.Lock, n)
	start := time.Now()
	prefix := strconv.FormatInt(start.UnixNano(), 36)
	for i := range locks {
		d := e.Adapter().Begin(ctx, exchange.Request{Method: "POST", Path: "/jobs", KeyLines: []string{prefix + "-" + strconv.Itoa(i)}, Body: []byte{}})
		if d.Lock == nil {
			for _, l := range locks[:i] {
				_ = l.Abandon(ctx, exchange.ReasonPanic)
			}
			return result{err: fmt.Errorf("key %d not taken: status %d %s", i, d.Response.Status, d.Response.Body)}
		}
		locks[i] = d.Lock
	}
	r := result{taken: time.Since(start)}
	time.Sleep(hold)
	for _, l := range locks {
		if context.Cause(l.Context()) != nil {
			r.lost++
		}
	}
	// Finish concurrently, as handlers would, a few at a time.
	var refused atomic.Int64
	var wg sync.WaitGroup
	next := make(chan exchange.Lock)
	for range 16 {
		wg.Go(func() {
			for l := range next {
				if l.Finish(ctx, 201, nil).Outcome == exchange.LockLost {
					refused.Add(1)
				}
			}
		})
	}
	for _, l := range locks {
		next <- l
	}
	close(next)
	wg.Wait()
	r.refused = int(refused.Load())
	r.renewals = counted.calls()
	return r
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "renewbench: "+format+"\n", args...)
	os.Exit(1)
}

// open returns a fresh, empty store named name and a function that closes it.
func open(name string, pool int) (idem.Store, func(), error) {
	switch name {
	case "memory":
		s := memstore.New()
		return s, func() { s.Close() }, nil
	case "bare":
		s := memstore.New()
		return struct{ idem.Store }{s}, func() { s.Close() }, nil
	case "sqlite":
		dir, err := os.MkdirTemp("", "renewbench-")
		if err != nil {
			return nil, nil, err
		}
		db, err := sqlitedb.Open(filepath.Join(dir, "idem.db"), quiet())
		if err != nil {
			return nil, nil, err
		}
		return gormStore(db, func() { _ = os.RemoveAll(dir) })
	case "postgres", "mysql":
		env := map[string]string{"postgres": "IDEMKIT_TEST_POSTGRES_DSN", "mysql": "IDEMKIT_TEST_MYSQL_DSN"}[name]
		dsn := os.Getenv(env)
		if dsn == "" {
			return nil, nil, fmt.Errorf("%s is not set (make bench-renew starts the servers)", env)
		}
		dial := postgres.Open
		if name == "mysql" {
			dial = mysql.Open
		}
		db, err := gorm.Open(dial(dsn), quiet())
		if err != nil {
			return nil, nil, err
		}
		sqlDB, err := db.DB()
		if err != nil {
			return nil, nil, err
		}
		sqlDB.SetMaxOpenConns(pool)
		table := fmt.Sprintf("renewbench_%d", time.Now().UnixNano())
		return gormStore(db, func() { _ = db.Migrator().DropTable(table) }, gormstore.WithTable(table))
	case "redis", "redis-cluster":
		env := map[string]string{"redis": "IDEMKIT_TEST_REDIS_ADDR", "redis-cluster": "IDEMKIT_TEST_REDIS_CLUSTER_ADDRS"}[name]
		addrs := os.Getenv(env)
		if addrs == "" {
			return nil, nil, fmt.Errorf("%s is not set (make bench-renew starts the servers)", env)
		}
		c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: strings.Split(addrs, ","), PoolSize: pool,
			ContextTimeoutEnabled: true, IsClusterMode: name == "redis-cluster"})
		s, err := redisstore.New(c, redisstore.WithPrefix(fmt.Sprintf("renewbench:%d:", time.Now().UnixNano())))
		if err != nil {
			return nil, nil, err
		}
		return s, func() { _ = c.Close() }, nil
	}
	return nil, nil, fmt.Errorf("unknown store %q", name)
}

func gormStore(db *gorm.DB, cleanup func(), opts ...gormstore.Option) (idem.Store, func(), error) {
	s, err := gormstore.New(db, opts...)
	if err == nil {
		err = s.AutoMigrate(context.Background())
	}
	if err != nil {
		return nil, nil, err
	}
	return s, func() {
		_ = s.Close()
		cleanup()
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	}, nil
}

func quiet() *gorm.Config { return &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)} }
