// Package sqlitedb opens SQLite databases set up for gormstore: pure Go
// (github.com/glebarez/sqlite, no cgo), in WAL mode, with a busy timeout and
// immediate transactions, so that concurrent requests in one process wait
// for each other instead of failing with "database is locked".
//
// It is a package of its own so that programs using gormstore with
// PostgreSQL or MySQL do not link an SQLite engine. Through the *gorm.DB
// Open returns, gormstore also opens connections of its own to the file,
// whose statements it prepares once.
package sqlitedb

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemkit/idemkit/stores/gorm/internal/sqlitefile"
)

// BusyTimeoutMillis is how long a statement waits for another connection's
// write to finish before failing. SQLite has a single writer; with WAL,
// readers never wait.
const BusyTimeoutMillis = 10_000

// MaxOpenConns bounds the pool Open returns. SQLite has one writer, so more
// connections add no write throughput; unbounded, an overloaded server
// opened one per waiting request, thousands of them, which then contended
// on the SQLite engine's shared page-cache lock, slowed every request
// further and ran the process out of file descriptors. With the bound, a
// request waits for a connection in the pool's queue, which it leaves at
// once if its client goes away. Change it with the pool's SetMaxOpenConns.
// A handler using gormstore's transactional completion should do all its
// database work in that transaction: one that also waits for a second
// connection can be held up behind requests waiting for the write lock.
const MaxOpenConns = 16

// Open opens (creating if need be) the SQLite database file at path, the
// file the path names as it is: a '%' in it is no escape. A path with '?'
// or '#' (a DSN's parameters would be taken for a file name) or a NUL byte
// is refused, and so is a file with more than one name (hard links), which
// gormstore's one-process lock and SQLite's write-ahead log, both named
// after the path, cannot tell apart. Every connection of the pool gets:
//   - journal_mode=WAL: readers and the writer do not block each other;
//   - busy_timeout: a writer waits for the lock instead of failing;
//   - synchronous=NORMAL: durable across process crashes; a power loss may
//     lose the last transactions, never corrupt the file;
//   - BEGIN IMMEDIATE for transactions: a transaction takes the write lock
//     when it begins, as it would otherwise have to upgrade a read lock
//     later, which fails at once with SQLITE_BUSY whatever the timeout;
//
// and the pool holds at most MaxOpenConns connections.
//
// opts are passed to gorm.Open (a *gorm.Config, say).
func Open(path string, opts ...gorm.Option) (*gorm.DB, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	if looksLikeServerDSN(path) {
		return nil, fmt.Errorf("sqlitedb: %q looks like a database server's DSN, not an SQLite file path; "+
			"open MySQL with gorm.io/driver/mysql (user:pass@tcp(host:port)/db) and PostgreSQL with gorm.io/driver/postgres", path)
	}
	if err := sqlitefile.OneName(path); err != nil {
		return nil, fmt.Errorf("sqlitedb: %w", err)
	}
	dsn := fileURI(path) +
		"?_pragma=busy_timeout(" + strconv.Itoa(BusyTimeoutMillis) + ")" +
		"&_pragma=journal_mode(WAL)" +
		"&_pragma=synchronous(NORMAL)" +
		"&_txlock=immediate"
	db, err := gorm.Open(sqlite.Open(dsn), opts...)
	if err != nil {
		return nil, openError(path, false, err)
	}
	if err := db.Use(connPlugin{}); err != nil && !errors.Is(err, gorm.ErrRegistered) {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(MaxOpenConns)
	// The driver opens the file with the first connection.
	if err := sqlDB.Ping(); err != nil {
		sqlDB.Close()
		return nil, openError(path, false, err)
	}
	// Keep a few connections open between bursts: each new one re-runs the
	// pragmas.
	sqlDB.SetMaxIdleConns(8)
	return db, nil
}

// looksLikeServerDSN reports whether path is in the native DSN form of a
// database server driver (go-sql-driver/mysql's user:pass@tcp(host:port)/db,
// or a URL with a scheme) rather than a file path.
func looksLikeServerDSN(path string) bool {
	for _, marker := range []string{"@tcp(", "@unix(", "://"} {
		if strings.Contains(path, marker) {
			return true
		}
	}
	return false
}

// checkPath refuses a path Open and OpenReadOnly do not take: an empty
// one; one with '?' or '#', which reads as a DSN with parameters, where
// this package sets them itself; one with a NUL byte, which would end the
// name SQLite gets before its end.
func checkPath(path string) error {
	if path == "" || strings.ContainsAny(path, "?#\x00") {
		return errors.New("sqlitedb: the path must be non-empty, without '?', '#' or a NUL byte")
	}
	return nil
}

// fileURI returns the URI the driver opens for the file at path (the
// driver passes its DSN to SQLite as a URI, parameters and all). SQLite
// decodes every %HH of a URI's path and ends the path at '?' or '#', so
// those are escaped, and the file opened is the one named: "x%41.db", not
// "xA.db". An absolute path gets an empty authority ("file:///..."), as
// "file://x/y" would name a host, x.
func fileURI(path string) string {
	escaped := uriPath.Replace(path)
	if strings.HasPrefix(path, "/") {
		return "file://" + escaped
	}
	return "file:" + escaped
}

var uriPath = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")

// openError is the error of Open and OpenReadOnly (readOnly) when SQLite
// cannot open path, naming it and saying, where SQLite's code tells, what
// is wrong: a file that is not an SQLite database or whose header is
// damaged (SQLITE_NOTADB, SQLITE_CORRUPT), or a file that cannot be
// opened or written (SQLITE_CANTOPEN, where SQLite only says "unable to
// open database file: out of memory (14)", or SQLITE_READONLY).
func openError(path string, readOnly bool, err error) error {
	code := -1
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		code = coded.Code() & 0xff // the primary code of an extended one
	}
	switch {
	case code == sqlite3.SQLITE_NOTADB || code == sqlite3.SQLITE_CORRUPT:
		return fmt.Errorf("sqlitedb: the file %q is not a valid SQLite database (it is another kind of file, or a damaged one): %w", path, err)
	case readOnly:
		return fmt.Errorf("sqlitedb: cannot open the SQLite file %q for reading: %w", path, err)
	case code == sqlite3.SQLITE_CANTOPEN || code == sqlite3.SQLITE_READONLY:
		return fmt.Errorf("sqlitedb: cannot open or create the SQLite file %q (does its directory exist, and may this process write there?): %w", path, err)
	}
	return fmt.Errorf("sqlitedb: cannot open the SQLite file %q: %w", path, err)
}

// OpenReadOnly opens the existing SQLite database file at path (taken as
// Open takes it) for reading only, as an operator's tool does beside the
// process that writes it: it creates nothing, changes no setting of the
// file, and registers no connections of gormstore's own (see
// gormstore.Reader). A file in WAL mode is read with the process's latest
// commits.
func OpenReadOnly(path string, opts ...gorm.Option) (*gorm.DB, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	if looksLikeServerDSN(path) {
		return nil, fmt.Errorf("sqlitedb: %q looks like a database server's DSN, not an SQLite file path", path)
	}
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("sqlitedb: the SQLite file %q: %w", path, err)
	}
	if err := sqlitefile.OneName(path); err != nil {
		return nil, fmt.Errorf("sqlitedb: %w", err)
	}
	dsn := fileURI(path) + "?mode=ro&_pragma=busy_timeout(" + strconv.Itoa(BusyTimeoutMillis) + ")"
	db, err := gorm.Open(sqlite.Open(dsn), opts...)
	if err != nil {
		return nil, openError(path, true, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(MaxOpenConns)
	// Opening reads nothing of the file: reading its schema tells a file
	// that is not a database at once, rather than at the caller's first
	// statement.
	var tables int
	if err := sqlDB.QueryRow("SELECT count(*) FROM sqlite_master").Scan(&tables); err != nil {
		sqlDB.Close()
		return nil, openError(path, true, err)
	}
	return db, nil
}
