package gormstore

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
	"gorm.io/gorm"
)

// The crash tests run the handler in a child process (this test binary,
// re-executed with crashChildEnv set), kill it with SIGKILL at a crash
// point, and check what the database kept. The child announces on stdout
// where it listens and when it reached the crash point, then waits to be
// killed.
const (
	crashChildEnv   = "IDEMKIT_CRASH_CHILD" // the crash point
	crashBackendEnv = "IDEMKIT_CRASH_BACKEND"
	crashDSNEnv     = "IDEMKIT_CRASH_DSN"
	crashTableEnv   = "IDEMKIT_CRASH_TABLE"
	crashChargesEnv = "IDEMKIT_CRASH_CHARGES"

	// afterBusinessWrite: the handler wrote its charge; the record is
	// still in flight and nothing is committed.
	afterBusinessWrite = "after-business-write"
	// afterRecordUpdate: Complete wrote the record's completion in the
	// handler's transaction, which is not yet committed.
	afterRecordUpdate = "after-record-update"

	crashLine = "reached the crash point"
)

// crashEvidence is what the child sees inside its transaction at the crash
// point: proof that it died after the writes, not before.
func crashEvidence(s *Store, tx *gorm.DB, charges string) string {
	var n int
	if err := tx.Raw("SELECT COUNT(*) FROM " + charges).Scan(&n).Error; err != nil {
		return err.Error()
	}
	rec, err := getOn(s, tx, idem.ID{Key: crashKey})
	if errors.Is(err, idem.ErrNotFound) && s.local != nil {
		// On SQLite a record in flight lives in the process's memory.
		rec, err = s.Get(context.Background(), idem.ID{Key: crashKey})
	}
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s: %d charge, record %v", crashLine, n, rec.State)
}

const crashKey = "crash-1"

// crashChild is the child's main: it serves the charge handler with the
// store and blocks at the crash point.
func crashChild() int {
	point := os.Getenv(crashChildEnv)
	dsn := os.Getenv(crashDSNEnv)
	var (
		db  *gorm.DB
		err error
	)
	switch backend := os.Getenv(crashBackendEnv); backend {
	case "sqlite":
		db, err = sqlitedb.Open(dsn, quiet())
	case "postgres":
		db, err = openServer(dialPostgres(dsn), 4)
	case "mysql":
		db, err = openServer(dialMySQL(dsn), 4)
	default:
		err = fmt.Errorf("unknown backend %q", backend)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	s, err := New(db, WithTable(os.Getenv(crashTableEnv)), WithPurgeInterval(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	charges := os.Getenv(crashChargesEnv)
	block := func(tx *gorm.DB) {
		fmt.Println(crashEvidence(s, tx, charges))
		time.Sleep(time.Hour) // until SIGKILL
	}
	var h hooks
	switch point {
	case afterBusinessWrite:
		h.after = func(r *http.Request) int {
			tx, err := Tx(r.Context(), db)
			if err != nil {
				fmt.Println(err)
			}
			block(tx)
			return 0
		}
	case afterRecordUpdate:
		s.beforeCommit = block
	default:
		fmt.Fprintf(os.Stderr, "crash child: unknown crash point %q\n", point)
		return 2
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	fmt.Println("listening http://" + ln.Addr().String())
	e := quietEngine(s, nil)
	err = http.Serve(ln, TxMiddleware(idemhttp.Middleware(e)(chargeHandler(db, charges, nil, h))))
	fmt.Fprintln(os.Stderr, "crash child:", err)
	return 2
}

// startCrashChild starts the child and returns its base URL; it is killed
// at the end of the test if it still runs.
func startCrashChild(t *testing.T, env ...string) (*exec.Cmd, *bufio.Scanner, *bytes.Buffer, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(stdout)
	url, ok := strings.CutPrefix(readLine(t, lines, stderr), "listening ")
	if !ok {
		t.Fatalf("child said %q, want its address; stderr: %s", url, stderr)
	}
	return cmd, lines, stderr, url
}

// readLine reads the child's next line, failing after a minute.
func readLine(t *testing.T, lines *bufio.Scanner, stderr *bytes.Buffer) string {
	t.Helper()
	got := make(chan string, 1)
	go func() {
		if lines.Scan() {
			got <- lines.Text()
		}
		close(got)
	}()
	select {
	case line, ok := <-got:
		if !ok {
			t.Fatalf("the child exited; stderr: %s", stderr)
		}
		return line
	case <-time.After(time.Minute):
		t.Fatalf("no word from the child in a minute; stderr: %s", stderr)
	}
	return ""
}

// fakeClock is a clock tests move by hand.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestCrashRecovery kills the process running a handler, with SIGKILL,
// between its business write and the commit, and shows that no charge
// exists without its completed record and no completed record without its
// charge, and that the retry runs the handler exactly once: at once on
// SQLite, where the crash freed the key (its record in flight was in the
// dead process's memory), after the lease on a database server.
func TestCrashRecovery(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, point := range []string{afterBusinessWrite, afterRecordUpdate} {
				t.Run(point, func(t *testing.T) {
					testCrash(t, b, point)
				})
			}
		})
	}
}

func testCrash(t *testing.T, b backend, point string) {
	db := b.open(t)
	s := newStore(t, db)
	charges := createCharges(t, db)
	// The child is the process that serves the store until it dies: on
	// SQLite no other process could open it meanwhile.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	cmd, lines, stderr, childURL := startCrashChild(t,
		crashChildEnv+"="+point,
		crashBackendEnv+"="+b.name,
		crashDSNEnv+"="+b.dsn(t, db),
		crashTableEnv+"="+s.Table(),
		crashChargesEnv+"="+charges,
	)
	const key = crashKey

	// The first attempt: its client sees the connection drop.
	var wg sync.WaitGroup
	wg.Go(func() {
		if r, err := post(t, http.DefaultClient, childURL, key); err == nil {
			t.Errorf("the request to the crashed child got %d %s", r.status, r.body)
		}
	})
	want := crashLine + ": 1 charge, record in-flight"
	if point == afterRecordUpdate {
		want = crashLine + ": 1 charge, record completed"
	}
	if line := readLine(t, lines, stderr); line != want {
		t.Fatalf("child said %q, want %q; stderr: %s", line, want, stderr)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	wg.Wait()

	// The process starts again. What the crash left: no charge, and on a
	// database server an in-flight record (its lease, renewed by the
	// child until it died, still runs); on SQLite no record at all.
	s = reopen(t, s)
	local := s.OneProcess()
	ctx := testCtx(t)
	rec, err := s.Get(ctx, idem.ID{Key: key})
	switch {
	case local && !errors.Is(err, idem.ErrNotFound):
		t.Fatalf("record after the crash: %v (%v), want none: the crash frees the key", rec.State, err)
	case !local && (err != nil || rec.State != idem.InFlight):
		t.Fatalf("record after the crash: %v (%v), want in flight", rec.State, err)
	}
	if n := countCharges(t, db, charges); n != 0 {
		t.Fatalf("%d charges after the crash, want 0: a charge without its record", n)
	}

	// Retries, against the new process: on a database server 409 while
	// the lease runs, then the handler runs once; on SQLite it runs at
	// once. Later retries get its response replayed.
	clock := new(fakeClock)
	clock.Advance(time.Duration(time.Now().UnixNano()))
	var runs atomic.Int32
	url := serve(t, quietEngine(s, clock.Now), chargeHandler(db, charges, &runs, hooks{}))
	if !local {
		if r := mustPost(t, url, key); r.status != http.StatusConflict {
			t.Fatalf("retry within the lease = %d %s, want 409", r.status, r.body)
		}
		clock.Advance(2 * time.Minute) // past the child's lease
	}
	first := mustPost(t, url, key)
	if first.status != http.StatusCreated || first.replayed {
		t.Fatalf("retry = %d (replayed %v) %s, want a fresh 201", first.status, first.replayed, first.body)
	}
	for range 2 {
		again := mustPost(t, url, key)
		if again.status != http.StatusCreated || !again.replayed || again.body != first.body {
			t.Fatalf("later retry = %d (replayed %v) %s, want the 201 replayed", again.status, again.replayed, again.body)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times after the crash, want once", n)
	}
	if n := countCharges(t, db, charges); n != 1 {
		t.Fatalf("%d charges, want exactly 1", n)
	}
	if rec, err := s.Get(ctx, idem.ID{Key: key}); err != nil || rec.State != idem.Completed {
		t.Fatalf("record at the end: %v (%v), want completed", rec.State, err)
	}
}
