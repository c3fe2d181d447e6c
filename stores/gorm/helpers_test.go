package gormstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit/internal/testservers"
	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChild())
	}
	if os.Getenv(lockChildEnv) != "" {
		os.Exit(lockChild())
	}
	os.Exit(m.Run())
}

// backend is a database the tests run against.
type backend struct {
	name string
	// open returns a connection pool. SQLite gets a fresh file per test;
	// the servers' pools are shared by the whole test binary.
	open func(testing.TB) *gorm.DB
	// dsn is what another process needs to reach the same database.
	dsn func(tb testing.TB, db *gorm.DB) string
}

var backends = []backend{
	{"sqlite", openSQLite, func(_ testing.TB, db *gorm.DB) string { return sqlitePaths.get(db) }},
	{"postgres", openPostgres, func(tb testing.TB, _ *gorm.DB) string { return testservers.Require(tb, testservers.PostgresDSN) }},
	{"mysql", openMySQL, func(tb testing.TB, _ *gorm.DB) string { return testservers.Require(tb, testservers.MySQLDSN) }},
}

func backendNamed(name string) backend {
	for _, b := range backends {
		if b.name == name {
			return b
		}
	}
	panic("no backend " + name)
}

// quiet returns a new config each time: gorm.Open keeps the dialector and
// pool in the config it is given.
func quiet() *gorm.Config { return &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)} }

// sqlitePaths remembers which file each SQLite pool opened.
var sqlitePaths = pathRegistry{m: map[*gorm.DB]string{}}

type pathRegistry struct {
	sync.Mutex
	m map[*gorm.DB]string
}

func (p *pathRegistry) get(db *gorm.DB) string {
	p.Lock()
	defer p.Unlock()
	return p.m[db]
}

func openSQLite(tb testing.TB) *gorm.DB {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "idem.db")
	db, err := sqlitedb.Open(path, quiet())
	if err != nil {
		tb.Fatal(err)
	}
	sqlitePaths.Lock()
	sqlitePaths.m[db] = path
	sqlitePaths.Unlock()
	tb.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
		sqlitePaths.Lock()
		delete(sqlitePaths.m, db)
		sqlitePaths.Unlock()
	})
	return db
}

// sharedPool opens one pool per server for the whole test binary.
type sharedPool struct {
	once sync.Once
	db   *gorm.DB
	err  error
}

var postgresPool, mysqlPool sharedPool

func (p *sharedPool) get(tb testing.TB, env string, dial func(string) gorm.Dialector) *gorm.DB {
	tb.Helper()
	dsn := testservers.Require(tb, env)
	p.once.Do(func() { p.db, p.err = openServer(dial(dsn), 20) })
	if p.err != nil {
		tb.Fatalf("%s: %v", env, p.err)
	}
	return p.db
}

// openServer opens a pool of at most conns connections and checks the
// server answers.
func openServer(d gorm.Dialector, conns int) (*gorm.DB, error) {
	db, err := gorm.Open(d, quiet())
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(conns)
	sqlDB.SetMaxIdleConns(conns)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return db, sqlDB.PingContext(ctx)
}

func dialPostgres(dsn string) gorm.Dialector { return postgres.Open(dsn) }
func dialMySQL(dsn string) gorm.Dialector    { return mysql.Open(dsn) }

func openPostgres(tb testing.TB) *gorm.DB {
	return postgresPool.get(tb, testservers.PostgresDSN, dialPostgres)
}

func openMySQL(tb testing.TB) *gorm.DB {
	return mysqlPool.get(tb, testservers.MySQLDSN, dialMySQL)
}

// uniqueTable names a table no other test, test run or concurrent test
// binary uses.
func uniqueTable(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}

// newStore returns a Store on its own new table, with the purger off unless
// opts turn it on, and drops the table when the test ends.
func newStore(tb testing.TB, db *gorm.DB, opts ...Option) *Store {
	tb.Helper()
	opts = append([]Option{WithTable(uniqueTable("idem")), WithPurgeInterval(0)}, opts...)
	s, err := New(db, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.AutoMigrate(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = s.Close()
		dropTable(tb, db, s.sql.quotedTableName)
	})
	return s
}

// reopen returns a new Store on closed's table, which closed, now closed,
// no longer serves.
func reopen(tb testing.TB, closed *Store) *Store {
	tb.Helper()
	s, err := New(closed.db, WithTable(closed.table), WithPurgeInterval(0))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func dropTable(tb testing.TB, db *gorm.DB, quoted string) {
	tb.Helper()
	if err := db.Exec("DROP TABLE IF EXISTS " + quoted).Error; err != nil {
		tb.Errorf("drop %s: %v", quoted, err)
	}
}

// testCtx is a context for one test's database calls.
func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	tb.Cleanup(cancel)
	return ctx
}

// getOn reads id's record through db (a transaction, say).
func getOn(s *Store, db *gorm.DB, id idem.ID) (idem.Record, error) {
	scope, key := hashID(id)
	return s.get(s.session(db.Statement.Context, db.Statement.ConnPool), id, scope, key)
}
