package gormstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
)

// insertCompleted writes n completed records expiring at expires, in
// multi-row INSERTs, faster than n Acquire and Complete calls.
func insertCompleted(t *testing.T, s *Store, prefix string, n int, expires time.Time) {
	t.Helper()
	at := func(int) time.Time { return expires }
	insertRecords(t, s, idem.Completed, prefix, n, at, at)
}

// insertRecords writes n records in state, held by the token "tok", the
// i-th keyed prefix-i, with a lease until lease(i) and expiring at
// expires(i).
func insertRecords(tb testing.TB, s *Store, state idem.State, prefix string, n int, lease, expires func(i int) time.Time) {
	tb.Helper()
	if err := writeRecords(s, state, prefix, n, lease, expires); err != nil {
		tb.Fatal(err)
	}
}

// writeRecords is insertRecords, for a goroutine other than the test's.
func writeRecords(s *Store, state idem.State, prefix string, n int, lease, expires func(i int) time.Time) error {
	const perStatement = 250
	for done := 0; done < n; done += perStatement {
		rows := min(perStatement, n-done)
		var sql strings.Builder
		sql.WriteString("INSERT INTO " + s.sql.quotedTableName +
			" (scope_hash, key_hash, fingerprint, idem_state, owner_token, lease_until, created_at, expires_at, resp_status) VALUES ")
		args := make([]any, 0, rows*6)
		for i := range rows {
			if i > 0 {
				sql.WriteString(", ")
			}
			sql.WriteString("(?, ?, ?, ?, 'tok', ?, 0, ?, 200)")
			scope, key := hashID(idem.ID{Key: fmt.Sprintf("%s-%06d", prefix, done+i)})
			args = append(args, scope, key, fpA[:], int(state), nanos(lease(done+i)), nanos(expires(done+i)))
		}
		if err := s.db.Exec(sql.String(), args...).Error; err != nil {
			return err
		}
	}
	return nil
}

func countRecords(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.db.Raw("SELECT COUNT(*) FROM " + s.sql.quotedTableName).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPurgeLargeBacklog: a backlog of expired records goes in batches of
// the limit, and live records stay.
func TestPurgeLargeBacklog(t *testing.T) {
	const expired, live, batch = 2500, 10, 1000
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, b.open(t))
			insertCompleted(t, s, "old", expired, t0)
			insertCompleted(t, s, "new", live, t0.Add(time.Hour))
			var got []int
			for range 10 {
				n, err := s.Purge(testCtx(t), t0.Add(time.Minute), batch)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, n)
				if n < batch {
					break
				}
			}
			if fmt.Sprint(got) != "[1000 1000 500]" {
				t.Fatalf("batches deleted %v, want [1000 1000 500]", got)
			}
			if n := countRecords(t, s); n != live {
				t.Fatalf("%d records left, want the %d live ones", n, live)
			}
		})
	}
}

// purgers counts the goroutines running a purge loop.
func purgers() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "stores/gorm.(*Store).purgeLoop(")
}

// waitPurgers waits up to 5 s for the number of purge loops to be want.
func waitPurgers(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for purgers() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%d purge loops running, want %d", purgers(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPurger: the background purger deletes expired records on its own, in
// batches, using its clock, and Close stops it.
func TestPurger(t *testing.T) {
	before := purgers()
	clock := new(fakeClock)
	clock.Advance(time.Duration(t0.Add(time.Minute).UnixNano()))
	s := newStore(t, openSQLite(t), WithPurgeInterval(5*time.Millisecond), WithPurgeBatch(7), WithClock(idemtest.ClockOf(clock.Now)))
	insertCompleted(t, s, "old", 30, t0)
	insertCompleted(t, s, "new", 3, t0.Add(time.Hour))
	waitPurgers(t, before+1)
	deadline := time.Now().Add(10 * time.Second)
	for countRecords(t, s) != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d records left after 10 s, want the 3 live ones", countRecords(t, s))
		}
		time.Sleep(5 * time.Millisecond)
	}
	clock.Advance(time.Hour)
	for countRecords(t, s) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d records left after the clock moved, want 0", countRecords(t, s))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	waitPurgers(t, before)
	if _, err := s.Get(testCtx(t), idem.ID{Key: "x"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get after Close: %v, want ErrClosed", err)
	}
}

// TestCloseNoLeak: no purge loop survives Close, even one closed while it
// purges, and a store without a purger starts none.
func TestCloseNoLeak(t *testing.T) {
	before := purgers()
	db := openSQLite(t)
	var stores []*Store
	for i := range 5 {
		// The purger may run before the table exists: its warning is noise.
		s := newStore(t, db, WithPurgeInterval(time.Millisecond), WithPurgeBatch(1), WithLogger(discardLogger))
		insertCompleted(t, s, "old", 50*i, time.Now().Add(-time.Hour)) // expired: the purgers delete them
		stores = append(stores, s)
	}
	off := newStore(t, db) // WithPurgeInterval(0)
	waitPurgers(t, before+len(stores))
	// Close them once the last one (200 records, one a batch) has begun
	// to purge: some will be mid-purge.
	for deadline := time.Now().Add(time.Minute); countRecords(t, stores[len(stores)-1]) == 50*(len(stores)-1); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("in a minute, the purger deleted no record")
		}
	}
	for _, s := range stores {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := off.Close(); err != nil {
		t.Fatal(err)
	}
	// Close returns once each loop has signalled its exit; the goroutine may
	// still be unwinding its frame for a moment, so allow it that.
	waitPurgers(t, before)
}

// TestPurgerYieldsBetweenBatches: the background purger never runs its
// batches back to back. After each batch it waits purgeYield times as long
// as the batch took, so that requests' writes get most of the time (on
// SQLite, most of the single write lock) however large the backlog; and on
// SQLite it sizes the batches to about purgeHold each. The batches are
// timed on a fake meter (each batch takes twice purgeHold) and the pauses recorded,
// not slept.
func TestPurgerYieldsBetweenBatches(t *testing.T) {
	const expired, live, batch = 60, 3, 10
	const took = 2 * purgeHold
	clock := new(fakeClock)
	clock.Advance(time.Duration(t0.Add(time.Minute).UnixNano()))
	s := newStore(t, openSQLite(t), WithPurgeBatch(batch), WithClock(idemtest.ClockOf(clock.Now)))
	insertCompleted(t, s, "old", expired, t0)
	insertCompleted(t, s, "new", live, t0.Add(time.Hour))
	var (
		metered time.Time
		pauses  []time.Duration
		sizes   []int
	)
	s.meter = func() time.Time {
		metered = metered.Add(took) // read before and after each batch
		return metered
	}
	s.pause = func(_ context.Context, d time.Duration) bool {
		pauses = append(pauses, d)
		return true
	}
	s.onStatement = func(_ context.Context, query string) func(int64, error) {
		if !strings.HasPrefix(query, "DELETE") {
			return nil
		}
		return func(n int64, err error) {
			if err == nil {
				sizes = append(sizes, int(n))
			}
		}
	}
	s.purgeExpired(testCtx(t))
	if n := countRecords(t, s); n != live {
		t.Fatalf("%d records left, want the %d live ones", n, live)
	}
	if len(sizes) < 2 {
		t.Fatalf("%d batches: the test proves nothing", len(sizes))
	}
	// Every batch but the last deleted all it was allowed, and was
	// followed by a pause of purgeYield times its duration.
	if len(pauses) != len(sizes)-1 {
		t.Fatalf("%d pauses between %d batches (deleted %v), want one after each but the last", len(pauses), len(sizes), sizes)
	}
	for i, d := range pauses {
		if d != purgeYield*took {
			t.Fatalf("pause %d lasted %v after a batch of %v, want %v", i, d, took, purgeYield*took)
		}
	}
	// A batch of twice purgeHold: the next one is half as large,
	// down to one row, never above WithPurgeBatch.
	want := []int{batch, batch / 2, batch / 4, 1}
	for i, n := range sizes[:len(sizes)-1] {
		if w := want[min(i, len(want)-1)]; n != w {
			t.Fatalf("batch %d deleted %d rows (all: %v), want %d", i, n, sizes, w)
		}
	}
}

// TestPurgePacer: the batch size follows the rows per purgeHold the last
// batch managed, grows at most twofold a batch, stays within 1 and the
// limit; the pause is purgeYield times the batch, at least minPurgePause.
// Without a hold (database servers) the batch is always the limit.
func TestPurgePacer(t *testing.T) {
	p := pacer{limit: 1000, size: 16, hold: time.Millisecond}
	steps := []struct {
		n         int
		took      time.Duration
		size      int
		pause     time.Duration
		situation string
	}{
		{16, 100 * time.Microsecond, 32, minPurgePause, "fast: grows twofold at most"},
		{32, 100 * time.Microsecond, 64, minPurgePause, "fast again"},
		{64, 8 * time.Millisecond, 8, 32 * time.Millisecond, "slow: 8 rows a millisecond"},
		{8, 80 * time.Millisecond, 1, 320 * time.Millisecond, "very slow: one row"},
		{1, 0, 2, minPurgePause, "untimed: grows"},
	}
	for _, st := range steps {
		if pause := p.after(st.n, st.took); pause != st.pause || p.size != st.size {
			t.Fatalf("%s: after %d rows in %v: size %d, pause %v; want %d, %v", st.situation, st.n, st.took, p.size, pause, st.size, st.pause)
		}
	}
	p = pacer{limit: 7, size: 7, hold: time.Millisecond}
	for range 5 {
		p.after(7, time.Microsecond)
	}
	if p.size != 7 {
		t.Fatalf("size %d, want at most the limit 7", p.size)
	}
	p = pacer{limit: 1000, size: 1000}
	if pause := p.after(1000, 50*time.Millisecond); p.size != 1000 || pause != 200*time.Millisecond {
		t.Fatalf("without a hold: size %d, pause %v; want 1000, 200ms", p.size, pause)
	}
}
