package sqlitedb

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// openWithConn opens a database with Open and a conn to it through the
// plugin Open installs, as gormstore finds it.
func openWithConn(t *testing.T) (*gorm.DB, *conn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := Open(path, &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	opener, ok := db.Config.Plugins[connPlugin{}.Name()].(interface{ OpenConn(string) (any, error) })
	if !ok {
		t.Fatal("Open installed no plugin to open a conn")
	}
	c, err := opener.OpenConn(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.(*conn).Close() })
	return db, c.(*conn)
}

// blobValue is a driver.Valuer, as gormstore binds its key hashes.
type blobValue []byte

func (b blobValue) Value() (driver.Value, error) { return []byte(b), nil }

// TestConn: a conn binds and reads back what gormstore stores (blobs,
// empty and NULL included, integers, text), prepares each statement once,
// sees what the pool wrote, and reports SQLite's errors with their codes.
func TestConn(t *testing.T) {
	db, c := openWithConn(t)
	if err := db.Exec("CREATE TABLE t (k BLOB PRIMARY KEY, n INTEGER, s TEXT, b BLOB, e BLOB)").Error; err != nil {
		t.Fatal(err)
	}
	const insert = "INSERT INTO t (k, n, s, b, e) VALUES (?, ?, ?, ?, ?)"
	for i, k := range []string{"a", "b"} {
		n, err := c.Exec(insert, blobValue(k), int64(1)<<40+int64(i), "tök\x00en", []byte{}, nil)
		if err != nil || n != 1 {
			t.Fatalf("Exec: %d, %v", n, err)
		}
	}
	if len(c.stmts) != 1 {
		t.Fatalf("%d statements prepared for one query run twice, want 1", len(c.stmts))
	}
	var (
		n    int64
		s    sql.NullString
		b, e []byte
	)
	if err := c.QueryRow("SELECT n, s, b, e FROM t WHERE k = ?", blobValue("b")).Scan(&n, &s, &b, &e); err != nil {
		t.Fatal(err)
	}
	if n != 1<<40+1 || s.String != "tök\x00en" || b == nil || len(b) != 0 || e != nil {
		t.Fatalf("read back %d %q %v %v, want 1<<40+1, the text, an empty blob, NULL", n, s.String, b, e)
	}
	if err := c.QueryRow("SELECT n FROM t WHERE k = ?", blobValue("z")).Scan(&n); !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("no row: %v, want sql.ErrNoRows", err)
	}
	// The pool's writes are seen, and the conn's by the pool.
	big := bytes.Repeat([]byte{0, 0xff}, 1<<19)
	if err := db.Exec(insert, blobValue("c"), 3, "x", big, nil).Error; err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow("SELECT b FROM t WHERE k = ?", []byte("c")).Scan(&b); err != nil || !bytes.Equal(b, big) {
		t.Fatalf("a 1 MiB blob the pool wrote: %d bytes, %v", len(b), err)
	}
	var rows int
	if err := db.Raw("SELECT count(*) FROM t").Scan(&rows).Error; err != nil || rows != 3 {
		t.Fatalf("the pool sees %d rows (%v), want 3", rows, err)
	}
	var coded interface{ Code() int }
	if _, err := c.Exec(insert, blobValue("a"), 0, "", nil, nil); !errors.As(err, &coded) || coded.Code() != 1555 {
		t.Fatalf("a taken key: %v, want SQLITE_CONSTRAINT_PRIMARYKEY (1555)", err)
	}
	if _, err := c.Exec("INSERT INTO nowhere VALUES (?)", 1); err == nil {
		t.Fatal("a statement on a missing table ran")
	}
	if _, err := c.Exec(insert, blobValue("d"), 1); err == nil {
		t.Fatal("a statement with too few arguments ran")
	}
}

// TestConnBusy: with a busy timeout of 0 a conn's write fails at once
// with SQLITE_BUSY while another connection holds the write lock, and
// succeeds once it is free.
func TestConnBusy(t *testing.T) {
	db, c := openWithConn(t)
	if err := db.Exec("CREATE TABLE t (n INTEGER)").Error; err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	other, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetBusyTimeout(0); err != nil {
		t.Fatal(err)
	}
	var coded interface{ Code() int }
	if _, err := c.Exec("INSERT INTO t VALUES (1)"); !errors.As(err, &coded) || coded.Code()&0xff != 5 {
		t.Fatalf("a write behind another writer: %v, want SQLITE_BUSY", err)
	}
	if _, err := other.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exec("INSERT INTO t VALUES (1)"); err != nil || n != 1 {
		t.Fatalf("the write once the lock is free: %d, %v", n, err)
	}
}
