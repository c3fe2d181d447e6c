package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/memstore"
)

// at is a fixed, wall-only time for tests that move time by hand.
var at = time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC)

// acquireAt takes id for a request made at now: lease one second, expiry one
// minute, as a short-lived Engine would ask.
func acquireAt(s *memstore.Store, id idem.ID, token string, now time.Time) (idem.Record, idem.AcquireOutcome, error) {
	return s.Acquire(context.Background(), idem.Acquire{ID: id, Token: token, Now: now,
		LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(time.Minute)})
}

// fill acquires keys prefix-0, prefix-1, ... in scope until the store
// refuses one, and returns how many it accepted. Any other error fails tb.
func fill(tb testing.TB, s *memstore.Store, scope, prefix string, limit int, now time.Time) int {
	tb.Helper()
	for i := range limit {
		_, _, err := acquireAt(s, idem.ID{Scope: scope, Key: fmt.Sprint(prefix, i)}, "t", now)
		if errors.Is(err, idem.ErrStoreFull) {
			return i
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	return limit
}

// WithMaxRecords(n) means n records in the whole store: not n/64 per shard,
// which refused the 33rd key of a store bounded at 100.
func TestMaxRecordsIsStoreWide(t *testing.T) {
	for _, n := range []int{1, 7, 100, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			s := memstore.New(memstore.WithMaxRecords(n), memstore.WithPurgeInterval(0))
			if got := fill(t, s, "", "k-", 2*n, at); got != n {
				t.Fatalf("store bounded at %d accepted %d keys before refusing", n, got)
			}
			if got := s.Len(); got != n {
				t.Fatalf("Len = %d, want %d", got, n)
			}
			// A full store forgets no live key: every one is still there.
			for i := range n {
				if _, err := s.Get(context.Background(), idem.ID{Key: fmt.Sprint("k-", i)}); err != nil {
					t.Fatalf("key %d after the store filled: %v", i, err)
				}
			}
		})
	}
}

// The bound holds under concurrency: 100 goroutines racing for new keys get
// exactly n of them, never one more.
func TestMaxRecordsUnderConcurrency(t *testing.T) {
	const n, workers, each = 100, 100, 5
	s := memstore.New(memstore.WithMaxRecords(n), memstore.WithPurgeInterval(0))
	var accepted, refused atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				_, _, err := acquireAt(s, idem.ID{Key: fmt.Sprint(w, "-", i)}, "t", at)
				switch {
				case err == nil:
					accepted.Add(1)
				case errors.Is(err, idem.ErrStoreFull):
					refused.Add(1)
				default:
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if accepted.Load() != n || refused.Load() != workers*each-n || s.Len() != n {
		t.Fatalf("accepted %d, refused %d, Len %d; want %d, %d, %d",
			accepted.Load(), refused.Load(), s.Len(), n, workers*each-n, n)
	}
}

// One tenant filling the store must not lock the others out: by default a
// non-empty scope holds at most a tenth of the store.
func TestOneTenantCannotFillTheStore(t *testing.T) {
	const n = 1000
	s := memstore.New(memstore.WithMaxRecords(n), memstore.WithPurgeInterval(0))
	if got := fill(t, s, "mallory", "k-", n, at); got != n/10 {
		t.Fatalf("one tenant took %d of %d records; want the default quota %d", got, n, n/10)
	}
	for i := range 100 {
		id := idem.ID{Scope: fmt.Sprint("tenant-", i), Key: "k-0"}
		if _, outcome, err := acquireAt(s, id, "t", at); err != nil || outcome != idem.AcquireCreated {
			t.Fatalf("tenant %d after another filled its share: %v, %v", i, outcome, err)
		}
	}
}

// An application without tenants (every key in the empty scope) has the
// whole store: the quota binds the empty scope only beside tenants.
func TestEmptyScopeHasTheWholeStore(t *testing.T) {
	const n = 100
	s := memstore.New(memstore.WithMaxRecords(n), memstore.WithPurgeInterval(0))
	if got := fill(t, s, "", "k-", 2*n, at); got != n {
		t.Fatalf("the empty scope got %d of %d records", got, n)
	}
}

// Once a tenant holds records, callers left in the empty scope are one more
// tenant, under the same quota; when the tenants are gone, it has the
// store back.
func TestEmptyScopeBesideTenants(t *testing.T) {
	const n = 100
	ctx := context.Background()
	s := memstore.New(memstore.WithMaxRecords(n), memstore.WithPurgeInterval(0))
	tenant := idem.ID{Scope: "acct", Key: "k"}
	if _, _, err := acquireAt(s, tenant, "t", at); err != nil {
		t.Fatal(err)
	}
	if got := fill(t, s, "", "k-", n, at); got != n/10 {
		t.Fatalf("beside a tenant, the empty scope got %d records; want the quota %d", got, n/10)
	}
	if err := s.Release(ctx, tenant, "t"); err != nil {
		t.Fatal(err)
	}
	if got := fill(t, s, "", "more-", n, at); got != n-n/10 {
		t.Fatalf("with the tenant gone, the empty scope got %d more records; want %d", got, n-n/10)
	}
	// The empty scope now holds the whole store: a tenant arriving finds
	// it full. Once room is made, the tenant gets it, and the empty scope,
	// over its quota beside a tenant, gets none.
	if _, _, err := acquireAt(s, tenant, "t", at); !errors.Is(err, idem.ErrStoreFull) {
		t.Fatalf("tenant in a full store: %v", err)
	}
	for _, k := range []string{"k-0", "k-1"} {
		if err := s.Release(ctx, idem.ID{Key: k}, "t"); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := acquireAt(s, tenant, "t", at); err != nil {
		t.Fatalf("tenant once room was made: %v", err)
	}
	if _, _, err := acquireAt(s, idem.ID{Key: "k-0"}, "t", at); !errors.Is(err, idem.ErrStoreFull) {
		t.Fatalf("the empty scope, over its quota beside a tenant, took room: %v", err)
	}
	if s.Len() != n-1 || s.LenScope("") != n-2 || s.LenScope("acct") != 1 {
		t.Fatalf("Len %d, LenScope empty %d, acct %d", s.Len(), s.LenScope(""), s.LenScope("acct"))
	}
}

func TestWithMaxRecordsPerScope(t *testing.T) {
	const n = 100
	t.Run("Quota", func(t *testing.T) {
		// Options apply in any order.
		s := memstore.New(memstore.WithMaxRecordsPerScope(30), memstore.WithMaxRecords(n), memstore.WithPurgeInterval(0))
		for scope, want := range map[string]int{"a": 30, "b": 30, "c": 30} {
			if got := fill(t, s, scope, "k-", n, at); got != want {
				t.Fatalf("scope %q got %d records; want %d", scope, got, want)
			}
		}
		// 10 left in the store, fewer than d's quota.
		if got := fill(t, s, "d", "k-", n, at); got != 10 {
			t.Fatalf("scope d got %d records; want the 10 left", got)
		}
		if s.Len() != n || s.LenScope("a") != 30 || s.LenScope("d") != 10 || s.LenScope("e") != 0 {
			t.Fatalf("Len %d, LenScope a %d, d %d, e %d", s.Len(), s.LenScope("a"), s.LenScope("d"), s.LenScope("e"))
		}
	})
	t.Run("Off", func(t *testing.T) {
		s := memstore.New(memstore.WithMaxRecords(n), memstore.WithMaxRecordsPerScope(n), memstore.WithPurgeInterval(0))
		if got := fill(t, s, "a", "k-", 2*n, at); got != n {
			t.Fatalf("without a quota, one scope got %d of %d records", got, n)
		}
	})
}

// A full store, or a full scope, reclaims the room of expired records for a
// new key without waiting for the purger, and never the room of live ones:
// an in-flight record whose lease is still renewed outlives its expiry.
func TestFullStoreSweepsExpiredRecords(t *testing.T) {
	const n = 100
	ctx := context.Background()
	s := memstore.New(memstore.WithMaxRecords(n), memstore.WithPurgeInterval(0))
	for i := range 10 {
		if got := fill(t, s, fmt.Sprint("t", i), "k-", n, at); got != n/10 {
			t.Fatalf("tenant %d got %d records", i, got)
		}
	}
	renewed := idem.ID{Scope: "t0", Key: "k-0"}
	if err := s.Renew(ctx, renewed, "t", at.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := acquireAt(s, idem.ID{Scope: "late", Key: "k"}, "t", at.Add(30*time.Second)); !errors.Is(err, idem.ErrStoreFull) {
		t.Fatalf("new tenant in a store full of live records: %v", err)
	}
	if _, _, err := acquireAt(s, idem.ID{Scope: "late", Key: "k"}, "t", at.Add(time.Hour)); err != nil {
		t.Fatalf("new tenant in a store full of expired records: %v", err)
	}
	if got := s.Len(); got != 2 {
		t.Fatalf("after the sweep the store holds %d records; want the renewed one and the new one", got)
	}
	if rec, err := s.Get(ctx, renewed); err != nil || rec.Token != "t" {
		t.Fatalf("the renewed record was swept: %v", err)
	}

	// A scope at its quota gets its own expired records' room back.
	if got := fill(t, s, "a", "k-", n, at.Add(time.Hour)); got != n/10 {
		t.Fatalf("scope a got %d records", got)
	}
	if got := fill(t, s, "a", "more-", n, at.Add(2*time.Hour)); got != n/10 {
		t.Fatalf("once its records expired, scope a got %d new ones; want %d", got, n/10)
	}
}

// counts are what Len and LenScope say; want maps scope to records.
func checkCounts(t *testing.T, s *memstore.Store, step string, want map[string]int) {
	t.Helper()
	total := 0
	for scope, n := range want {
		total += n
		if got := s.LenScope(scope); got != n {
			t.Errorf("%s: LenScope(%q) = %d, want %d", step, scope, got, n)
		}
	}
	if got := s.Len(); got != total {
		t.Errorf("%s: Len = %d, want %d", step, got, total)
	}
}

// The counts behind the bounds follow every way a record comes and goes.
func TestCountsStayExact(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(memstore.WithMaxRecords(100), memstore.WithPurgeInterval(0))
	acquire := func(scope, key string, now time.Time, ttl time.Duration, want idem.AcquireOutcome) {
		t.Helper()
		id := idem.ID{Scope: scope, Key: key}
		_, outcome, err := s.Acquire(ctx, idem.Acquire{ID: id, Token: key + now.String(), Now: now,
			LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(ttl)})
		if err != nil || outcome != want {
			t.Fatalf("Acquire %v at %v: %v, %v; want %v", id, now.Sub(at), outcome, err, want)
		}
	}
	token := func(scope, key string) string {
		rec, err := s.Get(ctx, idem.ID{Scope: scope, Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return rec.Token
	}
	for _, k := range []string{"1", "2", "3"} {
		acquire("a", k, at, time.Minute, idem.AcquireCreated)
	}
	acquire("b", "1", at, time.Minute, idem.AcquireCreated)
	acquire("", "1", at, time.Hour, idem.AcquireCreated)
	acquire("a", "1", at, time.Minute, idem.AcquireExisting)
	checkCounts(t, s, "acquired", map[string]int{"a": 3, "b": 1, "": 1})

	if err := s.Complete(ctx, idem.ID{Scope: "a", Key: "1"}, token("a", "1"), idem.Completion{
		Response: exchange.Response{Status: 201}, CompletedAt: at, ExpiresAt: at.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, idem.ID{Scope: "a", Key: "2"}, token("a", "2")); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, idem.ID{Scope: "a", Key: "2"}, "stale"); !errors.Is(err, idem.ErrLockLost) {
		t.Fatal(err)
	}
	if err := s.Renew(ctx, idem.ID{Scope: "a", Key: "3"}, token("a", "3"), at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s, "completed, released, renewed", map[string]int{"a": 2, "b": 1, "": 1})

	acquire("b", "1", at.Add(2*time.Second), time.Minute, idem.AcquireTookOver)
	acquire("a", "1", at.Add(2*time.Minute), time.Minute, idem.AcquireCreated) // expired, replaced
	checkCounts(t, s, "taken over, replaced", map[string]int{"a": 2, "b": 1, "": 1})

	// At +30 min, b/1 (expired at +62 s) goes; a/1 (expires at +3 min)
	// too; a/3 (lease renewed to +1 h) and the empty scope's record stay.
	if n, err := s.Purge(ctx, at.Add(30*time.Minute), 100); err != nil || n != 2 {
		t.Fatalf("Purge deleted %d (%v); want 2", n, err)
	}
	checkCounts(t, s, "purged", map[string]int{"a": 1, "b": 0, "": 1})

	// A sweep for room: scope c fills its quota, its records expire, and
	// its next key sweeps them.
	if got := fill(t, s, "c", "k-", 100, at.Add(30*time.Minute)); got != 10 {
		t.Fatalf("scope c got %d records", got)
	}
	checkCounts(t, s, "c filled", map[string]int{"a": 1, "c": 10, "": 1})
	acquire("c", "new", at.Add(40*time.Minute), time.Minute, idem.AcquireCreated)
	checkCounts(t, s, "swept for room", map[string]int{"a": 1, "c": 1, "": 1})
}

// A record can be written to expire before every record the store swept
// past: an Engine with a shorter TTL sharing the store, or a completion
// expiring sooner than its acquisition. A full store still finds its room.
func TestSweepFindsRecordsThatExpireEarly(t *testing.T) {
	const n = 10
	ctx := context.Background()
	s := memstore.New(memstore.WithMaxRecords(n), memstore.WithPurgeInterval(0))
	if got := fill(t, s, "", "k-", n, at); got != n {
		t.Fatal(got)
	}
	// The refusal sweeps and learns nothing expires before +1 min.
	if _, _, err := acquireAt(s, idem.ID{Key: "new"}, "t", at); !errors.Is(err, idem.ErrStoreFull) {
		t.Fatal(err)
	}
	id := idem.ID{Key: "k-3"}
	if err := s.Complete(ctx, id, "t", idem.Completion{Response: exchange.Response{Status: 201},
		CompletedAt: at, ExpiresAt: at.Add(10 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := acquireAt(s, idem.ID{Key: "new"}, "t", at.Add(20*time.Second)); err != nil {
		t.Fatalf("a record expired at +10 s still holds its room at +20 s: %v", err)
	}
	if _, err := s.Get(ctx, id); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("the expired record: %v", err)
	}
}
