package storetests

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/grpc/internal/grpcsuite"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/internal/testservers"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
	redisstore "github.com/idemkit/idemkit/stores/redis"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

func TestInterceptorGORMSQLite(t *testing.T) {
	grpcsuite.Run(t, func(tb testing.TB) idem.Store {
		return gormStore(tb, openSQLite(tb, filepath.Join(tb.TempDir(), "idem.db")))
	})
}

func TestInterceptorGORMPostgres(t *testing.T) {
	db := postgresPool(t)
	grpcsuite.Run(t, func(tb testing.TB) idem.Store {
		table := "grpc_" + randomHex(6)
		tb.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + table) })
		return gormStore(tb, db, gormstore.WithTable(table))
	})
}

func TestInterceptorRedis(t *testing.T) {
	client := redisClient(t)
	grpcsuite.Run(t, func(tb testing.TB) idem.Store {
		prefix := "idemgrpc:" + randomHex(6) + ":"
		tb.Cleanup(func() { dropPrefix(tb, client, prefix) })
		s, err := redisstore.New(client, redisstore.WithPrefix(prefix))
		if err != nil {
			tb.Fatal(err)
		}
		return s
	})
}

func quiet() *gorm.Config { return &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)} }

// openSQLite opens the SQLite file at path, closed when tb ends.
func openSQLite(tb testing.TB, path string) *gorm.DB {
	tb.Helper()
	db, err := sqlitedb.Open(path, quiet())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { closeDB(db) })
	return db
}

func closeDB(db *gorm.DB) {
	if sqlDB, err := db.DB(); err == nil {
		_ = sqlDB.Close()
	}
}

var pgPool struct {
	once sync.Once
	db   *gorm.DB
	err  error
}

// postgresPool opens one pool for the test binary: each case has a table
// of its own in it.
func postgresPool(tb testing.TB) *gorm.DB {
	tb.Helper()
	dsn := testservers.Require(tb, testservers.PostgresDSN)
	pgPool.once.Do(func() { pgPool.db, pgPool.err = gorm.Open(postgres.Open(dsn), quiet()) })
	if pgPool.err != nil {
		tb.Fatalf("%s: %v", testservers.PostgresDSN, pgPool.err)
	}
	return pgPool.db
}

// gormStore returns a store on db with its table created, closed when tb
// ends; its purger does not run (the cases move a clock of their own).
func gormStore(tb testing.TB, db *gorm.DB, opts ...gormstore.Option) *gormstore.Store {
	tb.Helper()
	s, err := gormstore.New(db, append(opts, gormstore.WithPurgeInterval(0))...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.AutoMigrate(ctx); err != nil {
		tb.Fatal(err)
	}
	return s
}

func redisClient(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: testservers.Require(tb, testservers.RedisAddr), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		tb.Fatalf("Redis does not answer: %v", err)
	}
	return c
}

// dropPrefix deletes the keys a case left under its prefix.
func dropPrefix(tb testing.TB, c *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if err := c.Del(ctx, iter.Val()).Err(); err != nil {
			tb.Errorf("cleaning up %s: %v", prefix, err)
			return
		}
	}
	if err := iter.Err(); err != nil {
		tb.Errorf("cleaning up %s: %v", prefix, err)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
