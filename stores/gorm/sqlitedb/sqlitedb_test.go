package sqlitedb

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// TestConcurrentWriters: 100 goroutines write at once, in autocommit
// statements and in transactions that read before they write (the pattern
// that fails at once with SQLITE_BUSY under deferred transactions), and
// none sees "database is locked".
func TestConcurrentWriters(t *testing.T) {
	const goroutines, rounds = 100, 5
	db, err := Open(filepath.Join(t.TempDir(), "app.db"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			_ = sqlDB.Close()
		}
	})
	if err := db.Exec("CREATE TABLE counters (name TEXT PRIMARY KEY, n INTEGER NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("INSERT INTO counters VALUES ('shared', 0)").Error; err != nil {
		t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	start := make(chan struct{})
	for g := range goroutines {
		wg.Go(func() {
			<-start
			for r := range rounds {
				err := db.Exec("INSERT INTO counters VALUES (?, ?)", fmt.Sprint(g, "-", r), r).Error
				if err == nil {
					err = db.Transaction(func(tx *gorm.DB) error {
						var n int
						if err := tx.Raw("SELECT n FROM counters WHERE name = 'shared'").Scan(&n).Error; err != nil {
							return err
						}
						return tx.Exec("UPDATE counters SET n = ? WHERE name = 'shared'", n+1).Error
					})
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d goroutines failed, first with: %v", len(errs), errs[0])
	}
	var rows, shared int
	if err := db.Raw("SELECT COUNT(*) FROM counters").Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Raw("SELECT n FROM counters WHERE name = 'shared'").Scan(&shared).Error; err != nil {
		t.Fatal(err)
	}
	// Every read-modify-write transaction saw the one before it.
	if rows != goroutines*rounds+1 || shared != goroutines*rounds {
		t.Fatalf("%d rows and a shared count of %d, want %d and %d", rows, shared, goroutines*rounds+1, goroutines*rounds)
	}
}

func TestOpenRejectsBadPaths(t *testing.T) {
	for _, p := range []string{"", "a?b", "a#b", "a\x00b"} {
		if _, err := Open(p); err == nil {
			t.Errorf("Open(%q) succeeded", p)
		}
	}
}

// TestPragmas: every connection of the pool gets the settings, not just
// the first.
func TestPragmas(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "app.db"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	ctx := t.Context()
	var conns []interface{ Close() error }
	for range 3 {
		conn, err := sqlDB.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		var mode string
		var timeout, sync int
		if err := conn.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&timeout); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
			t.Fatal(err)
		}
		if mode != "wal" || timeout != BusyTimeoutMillis || sync != 1 {
			t.Fatalf("connection %d: journal_mode %s, busy_timeout %d, synchronous %d; want wal, %d, 1 (NORMAL)", len(conns), mode, timeout, sync, BusyTimeoutMillis)
		}
	}
	for _, c := range conns {
		_ = c.Close()
	}
	if got := sqlDB.Stats().MaxOpenConnections; got != MaxOpenConns {
		t.Fatalf("pool bound %d, want %d: an unbounded pool opens a connection per waiting request", got, MaxOpenConns)
	}
}

// Defects: an unwritable path failed with "out of memory (14)", and a
// MySQL DSN in the driver's native form was taken as a file name.
func TestOpenErrorsSayWhatIsWrong(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "no-such-dir", "app.db"))
	if err == nil || !strings.Contains(err.Error(), "cannot open or create the SQLite file") || !strings.Contains(err.Error(), "no-such-dir") {
		t.Fatalf("Open in a missing directory: %v, want an error naming the path", err)
	}
	_, err = Open("app:secret@tcp(127.0.0.1:3306)/payments")
	if err == nil || !strings.Contains(err.Error(), "gorm.io/driver/mysql") {
		t.Fatalf("Open of a MySQL DSN: %v, want an error saying it is a server DSN", err)
	}
}

// Defect: the driver takes its DSN as an SQLite URI, which decodes %HH in
// the path, so Open("x%41.db") created xA.db, and a file named
// "50%25 a%20b.db" was never opened: "50% a b.db", a new empty database,
// was. A path that begins with "//" named a URI's host. Open and
// OpenReadOnly open the file named, and nothing else.
func TestOpenOpensTheFileNamed(t *testing.T) {
	quiet := &gorm.Config{Logger: logger.Discard}
	dir := t.TempDir()
	t.Chdir(dir)
	names := []string{"x%41.db", "50%25 a%20b.db", "100%.db", "%zz%", "a%00b.db", "%2e%2e%2fup.db"}
	for _, name := range names {
		for _, path := range []string{name, filepath.Join(dir, name), "/" + filepath.Join(dir, name)} {
			t.Run(path, func(t *testing.T) {
				db, err := Open(path, quiet)
				if err != nil {
					t.Fatal(err)
				}
				err = db.Exec("CREATE TABLE IF NOT EXISTS t (path TEXT)").Error
				if err == nil {
					err = db.Exec("INSERT INTO t VALUES (?)", path).Error
				}
				closeDB(t, db)
				if err != nil {
					t.Fatal(err)
				}
				var files []string
				entries, err := os.ReadDir(dir)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range entries {
					files = append(files, e.Name())
				}
				if !slices.Contains(files, name) {
					t.Fatalf("Open(%q) made the files %q, not %q", path, files, name)
				}
				ro, err := OpenReadOnly(path, quiet)
				if err != nil {
					t.Fatal(err)
				}
				defer closeDB(t, ro)
				var paths []string
				if err := ro.Raw("SELECT path FROM t").Scan(&paths).Error; err != nil || !slices.Contains(paths, path) {
					t.Fatalf("OpenReadOnly(%q) read %q, %v; want the row written through the same path", path, paths, err)
				}
			})
		}
	}
	// Every file is one of the names, or its write-ahead log or shared
	// memory: none was opened under another name.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		base := strings.TrimSuffix(strings.TrimSuffix(e.Name(), "-wal"), "-shm")
		if !slices.Contains(names, base) {
			t.Errorf("a file no path named: %q", e.Name())
		}
	}
}

// Defect: a file that is not an SQLite database (another kind of file, or
// one whose header is damaged) failed to open with a message asking
// whether its directory existed and was writable. The error says what is
// wrong, names the file, and the file is left as it was.
func TestOpenNotADatabase(t *testing.T) {
	quiet := &gorm.Config{Logger: logger.Discard}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	db, err := Open(good, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("CREATE TABLE t (n INTEGER)").Error; err != nil {
		t.Fatal(err)
	}
	closeDB(t, db)
	valid, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	damaged := func(from, to int) []byte {
		b := bytes.Clone(valid)
		for i := from; i < to; i++ {
			b[i] = 0xa5
		}
		return b
	}
	for name, content := range map[string][]byte{
		"text":       []byte("order,amount\n1,100\n"),
		"binary":     bytes.Repeat([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0}, 1024),
		"header":     damaged(0, 16),           // SQLite's "SQLite format 3" magic
		"first page": damaged(100, len(valid)), // after the file header: the schema
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "records.db")
			if err := os.WriteFile(path, content, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Open(path, quiet)
			// Open leaves nothing beside the file (OpenReadOnly, like any
			// reader of a database in WAL mode, may leave SQLite's -wal
			// and -shm, empty).
			if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
				t.Errorf("Open left %d files beside the database, want none", len(entries)-1)
			}
			_, roErr := OpenReadOnly(path, quiet)
			for _, err := range []error{err, roErr} {
				if err == nil || !strings.Contains(err.Error(), "not a valid SQLite database") ||
					!strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "directory") {
					t.Fatalf("Open and OpenReadOnly: %v; want an error naming the file, saying it is not a valid SQLite database", err)
				}
			}
			if after, err := os.ReadFile(path); err != nil || !bytes.Equal(after, content) {
				t.Fatalf("the file changed (%v)", err)
			}
		})
	}
}

func closeDB(t *testing.T, db *gorm.DB) {
	t.Helper()
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlDB.Close(); err != nil {
		t.Fatal(err)
	}
}
