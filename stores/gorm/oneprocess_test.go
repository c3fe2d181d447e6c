package gormstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/glebarez/sqlite"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemtest"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
)

// lockChildEnv, set to an SQLite file's path, makes this test binary a
// second process that opens a store on that file and says on stdout what
// sqlitedb.Open and New answered.
const lockChildEnv = "IDEMKIT_LOCK_CHILD"

func lockChild() int {
	db, err := sqlitedb.Open(os.Getenv(lockChildEnv), quiet())
	if err != nil {
		fmt.Println("refused by sqlitedb.Open:", err)
		return 0
	}
	s, err := New(db, WithPurgeInterval(0))
	if err != nil {
		fmt.Println("refused:", err)
		return 0
	}
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "lock child:", err)
		return 2
	}
	fmt.Println("opened")
	return 0
}

// secondProcess runs lockChild on path and returns what it said.
func secondProcess(t *testing.T, path string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lockChildEnv+"="+path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the second process: %v; stderr: %s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("the second process did not end in a minute; stderr: %s", stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// openStore opens a store on db with the purger off, and closes it at the
// end of the test unless the test did.
func openStore(t *testing.T, db *gorm.DB, opts ...Option) *Store {
	t.Helper()
	s, err := New(db, append([]Option{WithPurgeInterval(0)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestSQLiteOneProcess: a SQLite store serves one process. While a store
// of this process is open on a file, the New of a second process fails and
// names the file; the stores of this process share it, on one pool or
// several, the records in flight included; once the last of them is
// closed, the second process opens the file, and this process again after
// it.
func TestSQLiteOneProcess(t *testing.T) {
	pools := independentPools(t, backendNamed("sqlite"), 2)
	first := openStore(t, pools[0])
	path := first.local.file.path
	other := openStore(t, pools[0], WithTable("other_records"))
	second := openStore(t, pools[1]) // another pool, the same table
	if !first.OneProcess() || !second.OneProcess() {
		t.Fatal("a SQLite store says other processes may use its records")
	}
	ctx := testCtx(t)
	if err := first.AutoMigrate(ctx); err != nil {
		t.Fatal(err)
	}
	id := idem.ID{Key: "shared"}
	if _, o, err := first.Acquire(ctx, acquireAt(id, "tok-1", t0)); err != nil || o != idem.AcquireCreated {
		t.Fatalf("Acquire: %v, %v", o, err)
	}
	if rec, o, err := second.Acquire(ctx, acquireAt(id, "tok-2", t0)); err != nil || o != idem.AcquireExisting || rec.Token != "tok-1" {
		t.Fatalf("Acquire through another pool of the process: %v held by %q, %v; want the key held by tok-1", o, rec.Token, err)
	}

	said := secondProcess(t, path)
	if !strings.HasPrefix(said, "refused:") || !strings.Contains(said, path) || !strings.Contains(said, "one process") ||
		!strings.Contains(said, "PostgreSQL or MySQL") {
		t.Fatalf("a second process on the file: %q; want New refused, naming the file and the one-process rule", said)
	}
	for _, s := range []*Store{first, other} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if said := secondProcess(t, path); !strings.HasPrefix(said, "refused:") {
		t.Fatalf("a second process while a store of this one is still open: %q, want it refused", said)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if said := secondProcess(t, path); said != "opened" {
		t.Fatalf("a second process once every store of this one is closed: %q, want it to open the file", said)
	}
	again := openStore(t, pools[1])
	if _, err := again.Get(ctx, id); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("the key held when the stores closed: %v, want it free", err)
	}
}

// TestSQLiteInMemory: an in-memory database, on a pool of one connection,
// needs no lock and takes no connection for good: the store's writes take
// the pool's one in turn with every other call. It keeps the store
// contract.
func TestSQLiteInMemory(t *testing.T) {
	idemtest.TestStore(t, func(tb testing.TB) idem.Store {
		db, err := gorm.Open(sqlite.Open("file::memory:"), quiet())
		if err != nil {
			tb.Fatal(err)
		}
		sqlDB, err := db.DB()
		if err != nil {
			tb.Fatal(err)
		}
		sqlDB.SetMaxOpenConns(1)
		tb.Cleanup(func() { _ = sqlDB.Close() })
		s, err := New(db, WithPurgeInterval(0))
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = s.Close() })
		if s.local.file.lock != nil || s.local.writer.own != nil {
			tb.Fatal("an in-memory database got a lock or a connection of its own")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.AutoMigrate(ctx); err != nil {
			tb.Fatal(err)
		}
		return s
	})
}

// Defect: the lock is named after the file's path, so a second process on
// a hard link (another name of the same file) got past it: two locks, and
// SQLite's write-ahead logs, named after the paths too, two for one
// database. A file with more than one name is refused, in another process
// and in this one, naming the file and saying why: by sqlitedb.Open (and
// OpenReadOnly) before it opens the file, and by New on a pool opened
// before the link was made. A symbolic link, which SQLite follows to the file's own name,
// meets the lock.
func TestSQLiteOtherNames(t *testing.T) {
	db := openSQLite(t)
	path := sqlitePaths.get(db)
	dir := filepath.Dir(path)
	first := openStore(t, db)
	ctx := testCtx(t)
	if err := first.AutoMigrate(ctx); err != nil {
		t.Fatal(err)
	}
	id := idem.ID{Key: "held"}
	if _, o, err := first.Acquire(ctx, acquireAt(id, "tok-1", t0)); err != nil || o != idem.AcquireCreated {
		t.Fatalf("Acquire: %v, %v", o, err)
	}

	symlink := filepath.Join(dir, "symlink.db")
	if err := os.Symlink(path, symlink); err != nil {
		t.Fatal(err)
	}
	if said := secondProcess(t, symlink); !strings.HasPrefix(said, "refused:") || !strings.Contains(said, "one process") {
		t.Fatalf("a second process through a symbolic link: %q; want it refused by the lock", said)
	}

	hardLink := filepath.Join(dir, "hard.db")
	if err := os.Link(path, hardLink); err != nil {
		t.Fatal(err)
	}
	if said := secondProcess(t, hardLink); !strings.HasPrefix(said, "refused") || !strings.Contains(said, hardLink) ||
		!strings.Contains(said, "2 names") {
		t.Fatalf("a second process on a hard link to the file: %q; want it refused, naming the file and its 2 names", said)
	}
	for _, p := range []string{hardLink, path} {
		if _, err := sqlitedb.Open(p, quiet()); err == nil || !strings.Contains(err.Error(), "2 names") {
			t.Fatalf("sqlitedb.Open in this process on %s, while the file has 2 names: %v; want it refused", p, err)
		}
		// A reader through the other name would miss the log's commits.
		if _, err := sqlitedb.OpenReadOnly(p, quiet()); err == nil || !strings.Contains(err.Error(), "2 names") {
			t.Fatalf("sqlitedb.OpenReadOnly on %s, while the file has 2 names: %v; want it refused", p, err)
		}
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if _, err := os.Stat(hardLink + suffix); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: %v; want SQLite to have made no file for the second name", hardLink+suffix, err)
		}
	}
	// New checks too: the pool may come from elsewhere, or the link after
	// the pool.
	other := openSQLite(t)
	if err := os.Link(sqlitePaths.get(other), filepath.Join(dir, "other-hard.db")); err != nil {
		t.Fatal(err)
	}
	if s, err := New(other, WithPurgeInterval(0)); err == nil || !strings.Contains(err.Error(), "2 names") ||
		!strings.Contains(err.Error(), sqlitePaths.get(other)) {
		if err == nil {
			_ = s.Close()
		}
		t.Fatalf("New on a pool whose file got a second name: %v; want it refused, naming the file", err)
	}

	// The store already open keeps its key, and is the file's only one.
	if err := first.Complete(ctx, id, "tok-1", idem.Completion{Response: exchange.Response{Status: 201},
		CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(hardLink); err != nil {
		t.Fatal(err)
	}
	if said := secondProcess(t, path); !strings.HasPrefix(said, "refused:") || !strings.Contains(said, "one process") {
		t.Fatalf("a second process once the hard link is gone: %q; want it refused by the lock", said)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if said := secondProcess(t, symlink); said != "opened" {
		t.Fatalf("a second process once the store is closed: %q, want it to open the file", said)
	}
}
