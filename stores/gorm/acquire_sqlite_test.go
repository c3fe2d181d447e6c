package gormstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// TestSQLiteStatements: on SQLite a new key costs one read and one write.
// Acquire reads the key's completed record, finds none and holds the key
// in memory; Complete writes the completed record, its single write. A
// retry while the key is in flight, a takeover of a lapsed lease, a
// renewal and a release touch no table; a replay is the read alone; an
// expired record is deleted, as the purger would have, before the key is
// taken, so that a release leaves no record at all.
func TestSQLiteStatements(t *testing.T) {
	s := newStore(t, openSQLite(t))
	statements := recordStatements(s)
	ctx := testCtx(t)
	id := idem.ID{Key: "k"}
	acquire := func(token string, now time.Time) func() (idem.AcquireOutcome, error) {
		return func() (idem.AcquireOutcome, error) {
			_, o, err := s.Acquire(ctx, acquireAt(id, token, now))
			return o, err
		}
	}
	steps := []struct {
		name    string
		call    func() (idem.AcquireOutcome, error)
		outcome idem.AcquireOutcome
		want    string
	}{
		{"new key", acquire("tok-1", t0), idem.AcquireCreated, "SELECT"},
		{"in flight", acquire("tok-2", t0.Add(time.Second)), idem.AcquireExisting, ""},
		{"lapsed lease", acquire("tok-3", t0.Add(time.Minute)), idem.AcquireTookOver, ""},
		{"renew", func() (idem.AcquireOutcome, error) {
			return idem.AcquireExisting, s.Renew(ctx, id, "tok-3", t0.Add(2*time.Minute))
		}, idem.AcquireExisting, ""},
		{"complete", func() (idem.AcquireOutcome, error) {
			return idem.AcquireExisting, s.Complete(ctx, id, "tok-3", idem.Completion{
				Response: exchange.Response{Status: 201}, CompletedAt: t0.Add(time.Minute), ExpiresAt: t0.Add(time.Hour)})
		}, idem.AcquireExisting, "INSERT"},
		{"replay", acquire("tok-4", t0.Add(2*time.Minute)), idem.AcquireExisting, "SELECT"},
		{"expired", acquire("tok-5", t0.Add(2*time.Hour)), idem.AcquireCreated, "SELECT DELETE SELECT"},
		{"release", func() (idem.AcquireOutcome, error) {
			return idem.AcquireExisting, s.Release(ctx, id, "tok-5")
		}, idem.AcquireExisting, ""},
		{"released", func() (idem.AcquireOutcome, error) {
			_, err := s.Get(ctx, id)
			if errors.Is(err, idem.ErrNotFound) {
				err = nil
			} else if err == nil {
				err = errors.New("a record remains")
			}
			return idem.AcquireExisting, err
		}, idem.AcquireExisting, "SELECT"},
		{"new again", acquire("tok-6", t0.Add(2*time.Hour)), idem.AcquireCreated, "SELECT"},
		{"complete again", func() (idem.AcquireOutcome, error) {
			return idem.AcquireExisting, s.Complete(ctx, id, "tok-6", idem.Completion{
				Response: exchange.Response{Status: 202}, CompletedAt: t0.Add(2 * time.Hour), ExpiresAt: t0.Add(3 * time.Hour)})
		}, idem.AcquireExisting, "INSERT"},
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
	rec, err := s.Get(ctx, id)
	if err != nil || rec.State != idem.Completed || rec.Token != "tok-6" || rec.Response.Status != 202 {
		t.Fatalf("record after the expired one was replaced: %v held by %q, status %d (%v); want completed by tok-6 with 202",
			rec.State, rec.Token, rec.Response.Status, err)
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
