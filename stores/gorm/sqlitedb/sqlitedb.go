// Package sqlitedb opens SQLite databases set up for gormstore: pure Go
// (github.com/glebarez/sqlite, no cgo), in WAL mode, with a busy timeout and
// immediate transactions, so that concurrent requests in one process wait
// for each other instead of failing with "database is locked".
//
// It is a package of its own so that programs using gormstore with
// PostgreSQL or MySQL do not link an SQLite engine.
package sqlitedb

import (
	"errors"
	"strconv"
	"strings"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
)

// BusyTimeoutMillis is how long a statement waits for another connection's
// write to finish before failing. SQLite has a single writer; with WAL,
// readers never wait.
const BusyTimeoutMillis = 10_000

// Open opens (creating if need be) the SQLite database file at path. Every
// connection of the pool gets:
//   - journal_mode=WAL: readers and the writer do not block each other;
//   - busy_timeout: a writer waits for the lock instead of failing;
//   - synchronous=NORMAL: durable across process crashes; a power loss may
//     lose the last transactions, never corrupt the file;
//   - BEGIN IMMEDIATE for transactions: a transaction takes the write lock
//     when it begins, as it would otherwise have to upgrade a read lock
//     later, which fails at once with SQLITE_BUSY whatever the timeout.
//
// opts are passed to gorm.Open (a *gorm.Config, say).
func Open(path string, opts ...gorm.Option) (*gorm.DB, error) {
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, errors.New("sqlitedb: the path must be non-empty, without '?' or '#'")
	}
	dsn := "file:" + path +
		"?_pragma=busy_timeout(" + strconv.Itoa(BusyTimeoutMillis) + ")" +
		"&_pragma=journal_mode(WAL)" +
		"&_pragma=synchronous(NORMAL)" +
		"&_txlock=immediate"
	db, err := gorm.Open(sqlite.Open(dsn), opts...)
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	// Keep a few connections open between bursts: each new one re-runs the
	// pragmas.
	sqlDB.SetMaxIdleConns(8)
	return db, nil
}
