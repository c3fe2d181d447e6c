package gormstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// TestSQLiteAcquireStatements: on SQLite a new key costs Acquire one
// statement, the upsert, where it cost a read and an INSERT; an expired
// record is replaced by the same statement. A replay or a 409 is the
// upsert, which changes nothing, and one read; a lapsed lease is taken
// over by a conditional UPDATE after them. Complete is one UPDATE.
func TestSQLiteAcquireStatements(t *testing.T) {
	s := newStore(t, openSQLite(t))
	statements := recordStatements(s)
	ctx := testCtx(t)
	steps := []struct {
		name    string
		call    func() (idem.AcquireOutcome, error)
		outcome idem.AcquireOutcome
		want    string
	}{
		{"new key", func() (idem.AcquireOutcome, error) {
			_, o, err := s.Acquire(ctx, acquireAt(idem.ID{Key: "k"}, "tok-1", t0))
			return o, err
		}, idem.AcquireCreated, "INSERT"},
		{"in flight", func() (idem.AcquireOutcome, error) {
			_, o, err := s.Acquire(ctx, acquireAt(idem.ID{Key: "k"}, "tok-2", t0.Add(time.Second)))
			return o, err
		}, idem.AcquireExisting, "INSERT SELECT"},
		{"lapsed lease", func() (idem.AcquireOutcome, error) {
			_, o, err := s.Acquire(ctx, acquireAt(idem.ID{Key: "k"}, "tok-3", t0.Add(time.Minute)))
			return o, err
		}, idem.AcquireTookOver, "INSERT SELECT UPDATE"},
		{"complete", func() (idem.AcquireOutcome, error) {
			return idem.AcquireExisting, s.Complete(ctx, idem.ID{Key: "k"}, "tok-3", idem.Completion{
				Response: idem.Response{Status: 201}, CompletedAt: t0.Add(time.Minute), ExpiresAt: t0.Add(time.Hour)})
		}, idem.AcquireExisting, "UPDATE"},
		{"replay", func() (idem.AcquireOutcome, error) {
			_, o, err := s.Acquire(ctx, acquireAt(idem.ID{Key: "k"}, "tok-4", t0.Add(2*time.Minute)))
			return o, err
		}, idem.AcquireExisting, "INSERT SELECT"},
		{"expired", func() (idem.AcquireOutcome, error) {
			_, o, err := s.Acquire(ctx, acquireAt(idem.ID{Key: "k"}, "tok-5", t0.Add(2*time.Hour)))
			return o, err
		}, idem.AcquireCreated, "INSERT"},
	}
	for _, st := range steps {
		statements()
		o, err := st.call()
		if err != nil || o != st.outcome {
			t.Fatalf("%s: %v, %v; want %v", st.name, o, err, st.outcome)
		}
		if got := statements(); got != st.want {
			t.Fatalf("%s ran %q, want %q", st.name, got, st.want)
		}
	}
	rec, err := s.Get(ctx, idem.ID{Key: "k"})
	if err != nil || rec.State != idem.InFlight || rec.Token != "tok-5" {
		t.Fatalf("record after the expired one was replaced: %v held by %q (%v), want in flight by tok-5", rec.State, rec.Token, err)
	}
}

// TestSQLiteAcquireOrderFollowsTraffic: in a storm of retries Acquire on
// SQLite reads first, so that each replay is a single SELECT, and once new
// keys are the more common again it returns to the upsert first.
func TestSQLiteAcquireOrderFollowsTraffic(t *testing.T) {
	s := newStore(t, openSQLite(t))
	statements := recordStatements(s)
	ctx := testCtx(t)
	acquire := func(key string, want idem.AcquireOutcome) string {
		t.Helper()
		statements()
		if _, o, err := s.Acquire(ctx, acquireAt(idem.ID{Key: key}, "tok-"+key, t0)); err != nil || o != want {
			t.Fatalf("Acquire %s: %v, %v; want %v", key, o, err, want)
		}
		return statements()
	}
	acquire("stormed", idem.AcquireCreated)
	var got []string
	for range foundBound + 2 {
		got = append(got, acquire("stormed", idem.AcquireExisting))
	}
	if got[0] != "INSERT SELECT" || got[len(got)-1] != "SELECT" {
		t.Fatalf("retries of one key ran %q, want the upsert and a read at first, then the read alone", got)
	}
	got = got[:0]
	for i := range 2*foundBound + 2 {
		got = append(got, acquire(fmt.Sprint("new-", i), idem.AcquireCreated))
	}
	if got[0] != "SELECT INSERT" || got[len(got)-1] != "INSERT" {
		t.Fatalf("new keys after the storm ran %q, want a read and an INSERT at first, then the upsert alone", got)
	}
}

// recordStatements makes s note the first word of each statement it runs;
// each call of the function it returns gives the words noted since the
// call before, space-separated.
func recordStatements(s *Store) func() string {
	var (
		mu   sync.Mutex
		seen []string
	)
	s.onStatement = func(_ context.Context, query string) func(int64, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, strings.Fields(query)[0])
		return nil
	}
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		got := strings.Join(seen, " ")
		seen = nil
		return got
	}
}
