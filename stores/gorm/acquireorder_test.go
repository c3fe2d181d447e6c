package gormstore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/internal/acquireorder"
	"gorm.io/gorm"
)

// On PostgreSQL Acquire inserts first while new keys are the common case,
// so that a new key is one statement, and reads first in a storm of
// retries, so that each replay or 409 is one read that writes nothing.
func TestPostgresAcquireOrderFollowsTraffic(t *testing.T) {
	for _, b := range []backend{backendNamed("postgres")} {
		t.Run(b.name, func(t *testing.T) {
			s := newStore(t, b.open(t))
			seen := recordStatements(s)
			ctx := testCtx(t)
			acquire := func(key string, want idem.AcquireOutcome) string {
				t.Helper()
				seen()
				if _, o, err := s.Acquire(ctx, acquireAt(idem.ID{Scope: t.Name(), Key: key}, "tok-"+key, t0)); err != nil || o != want {
					t.Fatalf("Acquire %s: %v, %v; want %v", key, o, err, want)
				}
				return seen()
			}
			var got []string
			for i := range 3 {
				got = append(got, acquire(fmt.Sprint("new-", i), idem.AcquireCreated))
			}
			if want := []string{"INSERT", "INSERT", "INSERT"}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("new keys ran %q, want %q: one INSERT each", got, want)
			}
			got = got[:0]
			for range acquireorder.Bound + 6 {
				got = append(got, acquire("new-0", idem.AcquireExisting))
			}
			if got[0] != "INSERT SELECT" || got[len(got)-1] != "SELECT" {
				t.Fatalf("retries of one key ran %q, want an INSERT and a read at first, then the read alone", got)
			}
			got = got[:0]
			for i := range 3 * acquireorder.Bound {
				got = append(got, acquire(fmt.Sprint("after-", i), idem.AcquireCreated))
			}
			if got[0] != "SELECT INSERT" || got[len(got)-1] != "INSERT" {
				t.Fatalf("new keys after the storm ran %q, want a read and an INSERT at first, then the INSERT alone", got)
			}
		})
	}
}

// On MySQL Acquire always reads first (see TestAcquireBesideADelete).
func TestMySQLAcquireReadsFirst(t *testing.T) {
	s := newStore(t, openMySQL(t))
	seen := recordStatements(s)
	ctx := testCtx(t)
	for i := range 3 * acquireorder.Bound {
		if _, o, err := s.Acquire(ctx, acquireAt(idem.ID{Scope: t.Name(), Key: fmt.Sprint("new-", i)}, "tok", t0)); err != nil || o != idem.AcquireCreated {
			t.Fatalf("Acquire: %v, %v", o, err)
		}
		if got := seen(); got != "SELECT INSERT" {
			t.Fatalf("new key %d ran %q, want SELECT INSERT", i, got)
		}
	}
}

// Retries of a key whose record is being deleted (a Release after a 5xx, a
// purge, a forget) all get an answer when the delete commits: one takes
// the key, the others find it. On MySQL, INSERTs sent first deadlocked
// with each other there (InnoDB locks the row an INSERT finds taken), and
// each deadlock became a 503.
func TestAcquireBesideADelete(t *testing.T) {
	for _, b := range backends[1:] {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			s := newStore(t, db)
			ctx := testCtx(t)
			id := idem.ID{Scope: t.Name(), Key: "deleted"}
			if _, o, err := s.Acquire(ctx, acquireAt(id, "tok-holder", t0)); err != nil || o != idem.AcquireCreated {
				t.Fatalf("first: %v, %v", o, err)
			}
			tx := db.Begin()
			defer tx.Rollback()
			if err := tx.Exec("DELETE FROM " + s.sql.quotedTableName).Error; err != nil {
				t.Fatal(err)
			}
			const n = 4
			var wg sync.WaitGroup
			errs := make([]error, n)
			outcomes := make([]idem.AcquireOutcome, n)
			var returned atomic.Int32
			for i := range n {
				wg.Go(func() {
					_, outcomes[i], errs[i] = s.Acquire(ctx, acquireAt(id, fmt.Sprint("tok-", i), t0.Add(time.Second)))
					returned.Add(1)
				})
			}
			// Commit once every acquisition has either reached the deleted
			// row's lock (the database counts it waiting: PostgreSQL's
			// do) or returned (MySQL's read the row as it was before the
			// delete, and find it).
			for deadline := time.Now().Add(30 * time.Second); lockWaiters(t, db, b.name)+int(returned.Load()) < n; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("in 30 s, of %d acquisitions %d returned, and the others did not all wait for the row's lock", n, returned.Load())
				}
			}
			if err := tx.Commit().Error; err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			taken := 0
			for i, err := range errs {
				if err != nil {
					t.Errorf("acquisition %d failed: %v", i, err)
				}
				if outcomes[i] != idem.AcquireExisting {
					taken++
				}
			}
			if taken > 1 {
				t.Errorf("%d acquisitions took the key: %v", taken, outcomes)
			}
		})
	}
}

// lockWaiters returns how many statements wait for a lock in db's
// database: on PostgreSQL, as it says; on MySQL/MariaDB, the statements
// of this user's other sessions under way (the test's user has no PROCESS
// privilege to see InnoDB's lock waits, and while the row's delete is
// uncommitted, an acquisition under way is one that waits for it).
func lockWaiters(t *testing.T, db *gorm.DB, backend string) int {
	t.Helper()
	q := "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND IN ('Query', 'Execute') AND ID <> CONNECTION_ID()"
	if backend == "postgres" {
		q = "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"
	}
	var n int
	if err := db.Raw(q).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}
