// Package idemtest holds the conformance suites every idemkit store and
// adapter runs: TestStore for idem.Store implementations and TestMiddleware
// for HTTP adapters. Both use only the standard library.
package idemtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemadmin"
)

// TestStore runs the store contract (the doc comments of idem.Store) against
// stores made by newStore, a fresh, empty store for each subtest. Subtests
// are named after the clauses they check. A store that an operator can
// inspect and repair (idemadmin.Store, as every store of idemkit) is also
// held to the clauses of Forget (subtests Admin/...); see TestForgetFenced
// for the one a store with a Forget of two steps must add.
func TestStore(t *testing.T, newStore func(testing.TB) idem.Store) {
	t.Helper()
	for _, c := range storeChecks {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := c.check(ctx, newStore(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
	if _, ok := newStore(t).(AdminStore); !ok {
		return
	}
	for _, c := range adminChecks {
		t.Run("Admin/"+c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := c.check(ctx, newStore(t).(AdminStore)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// AdminStore is a store an operator can inspect and repair.
type AdminStore interface {
	idem.Store
	idemadmin.Store
}

type adminCheck struct {
	name  string
	check func(context.Context, AdminStore) error
}

// adminChecks are the clauses of idemadmin.Store's Forget that hold on
// every store.
var adminChecks = []adminCheck{
	{"Forget/NotFound", checkForgetNotFound},
	{"Forget/InFlightNeedsForce", checkForgetNeedsForce},
	{"Forget/ForceFencesHolder", checkForgetFencesHolder},
	{"Forget/Completed", checkForgetCompleted},
	{"Forget/ScopesApart", checkForgetScopesApart},
}

func checkForgetNotFound(ctx context.Context, s AdminStore) error {
	return wantErr("Forget of a missing record", s.Forget(ctx, idem.ID{Key: "k-never"}, true), idem.ErrNotFound)
}

// checkForgetNeedsForce: a record in flight, whose handler may run, is
// forgotten only with force; without, it is left to its holder.
func checkForgetNeedsForce(ctx context.Context, s AdminStore) error {
	id := idem.ID{Key: "k-forget-running"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok", t0), idem.AcquireCreated); err != nil {
		return err
	}
	if err := wantErr("Forget of a record in flight without force", s.Forget(ctx, id, false), idemadmin.ErrInFlight); err != nil {
		return err
	}
	if err := completeAt(ctx, s, id, "tok", sampleResponse(), t0); err != nil {
		return fmt.Errorf("the holder, after a Forget without force: %w", err)
	}
	return nil
}

// checkForgetFencesHolder: a record in flight forgotten with force is
// gone; its holder's later Renew, Complete or Release fails with
// ErrLockLost and never touches the record a new request writes after.
func checkForgetFencesHolder(ctx context.Context, s AdminStore) error {
	id := idem.ID{Key: "k-forget-stuck"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-stuck", t0), idem.AcquireCreated); err != nil {
		return err
	}
	if err := s.Forget(ctx, id, true); err != nil {
		return fmt.Errorf("forgetting a record in flight with force: %w", err)
	}
	if _, err := s.Get(ctx, id); !errors.Is(err, idem.ErrNotFound) {
		return fmt.Errorf("Get after a Forget with force: %v, want ErrNotFound", err)
	}
	if err := wantErr("Renew by the forgotten holder", s.Renew(ctx, id, "tok-stuck", t0.Add(2*lease)), idem.ErrLockLost); err != nil {
		return err
	}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-new", t0.Add(time.Second)), idem.AcquireCreated); err != nil {
		return fmt.Errorf("after a Forget with force: %w", err)
	}
	c := idem.Completion{Response: sampleResponse(), CompletedAt: t0, ExpiresAt: t0.Add(ttl)}
	if err := wantErr("Complete by the forgotten holder", s.Complete(ctx, id, "tok-stuck", c), idem.ErrLockLost); err != nil {
		return err
	}
	if err := wantErr("Release by the forgotten holder", s.Release(ctx, id, "tok-stuck"), idem.ErrLockLost); err != nil {
		return err
	}
	if rec, err := s.Get(ctx, id); err != nil || rec.State != idem.InFlight || rec.Token != "tok-new" {
		return fmt.Errorf("the new request's record, after the forgotten holder's calls: %v by %q (%v), want in flight by tok-new",
			rec.State, rec.Token, err)
	}
	return nil
}

// checkForgetCompleted: a completed record is forgotten without force, and
// its key runs anew.
func checkForgetCompleted(ctx context.Context, s AdminStore) error {
	id := idem.ID{Key: "k-forget-done"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok", t0), idem.AcquireCreated); err != nil {
		return err
	}
	if err := completeAt(ctx, s, id, "tok", sampleResponse(), t0); err != nil {
		return err
	}
	if err := s.Forget(ctx, id, false); err != nil {
		return fmt.Errorf("forgetting a completed record: %w", err)
	}
	if _, err := s.Get(ctx, id); !errors.Is(err, idem.ErrNotFound) {
		return fmt.Errorf("Get after Forget: %v, want ErrNotFound", err)
	}
	_, err := acquire(ctx, s, acquireAt(id, fpA, "tok-again", t0.Add(time.Second)), idem.AcquireCreated)
	return err
}

// checkForgetScopesApart: forgetting a key of one tenant leaves another
// tenant's record of the same key alone.
func checkForgetScopesApart(ctx context.Context, s AdminStore) error {
	a, b := idem.ID{Scope: "tenant-a", Key: "k-forget-shared"}, idem.ID{Scope: "tenant-b", Key: "k-forget-shared"}
	for _, id := range []idem.ID{a, b} {
		if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-"+id.Scope, t0), idem.AcquireCreated); err != nil {
			return err
		}
		if err := completeAt(ctx, s, id, "tok-"+id.Scope, sampleResponse(), t0); err != nil {
			return err
		}
	}
	if err := s.Forget(ctx, a, false); err != nil {
		return fmt.Errorf("forgetting: %w", err)
	}
	if rec, err := s.Get(ctx, b); err != nil || rec.State != idem.Completed {
		return fmt.Errorf("another tenant's record of the same key, after Forget: %v (%v), want it completed", rec.State, err)
	}
	return nil
}

// TestForgetFenced checks, for a store whose Forget reads the record and
// then deletes it in a second, conditional step (a statement or script),
// that a record changed between the two is left as it is and Forget
// answers idemadmin.ErrChanged: completed by its holder, taken over by
// another request, released, or recreated after it expired. A Forget that
// deleted by key alone, or by its token or state alone, would delete a
// response recorded meanwhile (its request then runs again) or a running
// handler's record. newStore makes a fresh, empty store for each subtest;
// between(s, f) makes f run in the next Forget on s once, after its read
// and before its delete (a store's statement hook does it, in the store's
// own tests). A store whose Forget is one atomic step (the memory store's)
// has no such gap and need not run it.
func TestForgetFenced(t *testing.T, newStore func(testing.TB) AdminStore, between func(s AdminStore, f func())) {
	t.Helper()
	for _, c := range fencedForgets {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := checkForgetChanged(ctx, newStore(t), between, c); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// fencedForget is a record, a change made to it between Forget's read and
// its delete, and what the record must be after.
type fencedForget struct {
	name   string
	force  bool
	before func(ctx context.Context, s idem.Store, id idem.ID) error
	change func(ctx context.Context, s idem.Store, id idem.ID) error
	after  func(rec idem.Record, err error) error // the record Get finds after
}

var fencedForgets = []fencedForget{
	{name: "CompletedMeanwhile", force: true, before: inFlightByTok1,
		change: func(ctx context.Context, s idem.Store, id idem.ID) error {
			return completeAt(ctx, s, id, "tok-1", sampleResponse(), t0.Add(time.Second))
		},
		after: func(rec idem.Record, err error) error {
			if err != nil || rec.State != idem.Completed {
				return fmt.Errorf("the response its holder recorded meanwhile: %v (%v), want it kept", rec.State, err)
			}
			return checkResponse(rec.Response, sampleResponse())
		}},
	{name: "TakenOverMeanwhile", force: true, before: inFlightByTok1,
		change: takenBy("tok-2", t0.Add(lease+time.Second), idem.AcquireTookOver), after: heldBy("tok-2")},
	{name: "RecreatedMeanwhile", force: false,
		before: func(ctx context.Context, s idem.Store, id idem.ID) error {
			if err := inFlightByTok1(ctx, s, id); err != nil {
				return err
			}
			return completeAt(ctx, s, id, "tok-1", sampleResponse(), t0)
		},
		change: takenBy("tok-2", t0.Add(ttl+time.Second), idem.AcquireCreated), after: heldBy("tok-2")},
	{name: "ReleasedMeanwhile", force: true, before: inFlightByTok1,
		change: func(ctx context.Context, s idem.Store, id idem.ID) error { return s.Release(ctx, id, "tok-1") },
		after: func(rec idem.Record, err error) error {
			if !errors.Is(err, idem.ErrNotFound) {
				return fmt.Errorf("Get: %v (%v), want ErrNotFound", rec.State, err)
			}
			return nil
		}},
}

// inFlightByTok1 is a fencedForget's before: a record in flight, held by
// tok-1 from t0.
func inFlightByTok1(ctx context.Context, s idem.Store, id idem.ID) error {
	return takenBy("tok-1", t0, idem.AcquireCreated)(ctx, s, id)
}

// takenBy returns a fencedForget's step: token acquires the key at now,
// with outcome want.
func takenBy(token string, now time.Time, want idem.AcquireOutcome) func(context.Context, idem.Store, idem.ID) error {
	return func(ctx context.Context, s idem.Store, id idem.ID) error {
		_, err := acquire(ctx, s, acquireAt(id, fpA, token, now), want)
		return err
	}
}

// heldBy is a fencedForget's after for a record a request took meanwhile.
func heldBy(token string) func(idem.Record, error) error {
	return func(rec idem.Record, err error) error {
		if err != nil || rec.State != idem.InFlight || rec.Token != token {
			return fmt.Errorf("the record %s took meanwhile: %v by %q (%v), want it kept", token, rec.State, rec.Token, err)
		}
		return nil
	}
}

func checkForgetChanged(ctx context.Context, s AdminStore, between func(AdminStore, func()), c fencedForget) error {
	id := idem.ID{Scope: "ops", Key: "k-forget-" + c.name}
	if err := c.before(ctx, s, id); err != nil {
		return err
	}
	var changed error
	ran := false
	between(s, func() {
		ran = true
		changed = c.change(ctx, s, id)
	})
	err := s.Forget(ctx, id, c.force)
	switch {
	case !ran:
		return errors.New("the change never ran inside Forget: the test proves nothing")
	case changed != nil:
		return fmt.Errorf("the change between Forget's read and its delete: %w", changed)
	case !errors.Is(err, idemadmin.ErrChanged):
		return fmt.Errorf("forgetting a record changed after its read: %v, want ErrChanged", err)
	}
	rec, err := s.Get(ctx, id)
	return c.after(rec, err)
}

type storeCheck struct {
	name  string
	check func(context.Context, idem.Store) error
}

// storeChecks are plain functions returning errors so that the suite itself
// can be tested against deliberately broken stores.
var storeChecks = []storeCheck{
	{"Acquire/New", checkAcquireNew},
	{"Acquire/InFlight", checkAcquireInFlight},
	{"Acquire/TakeoverAfterLease", checkTakeoverAfterLease},
	{"Acquire/NoTakeoverWithOtherFingerprint", checkNoTakeoverOtherFingerprint},
	{"Acquire/Completed", checkAcquireCompleted},
	{"Acquire/ScopesApart", checkScopesApart},
	{"IDs/AnyBytes", checkAnyBytes},
	{"Expired/Completed", checkExpiredCompleted},
	{"Expired/InFlight", checkExpiredInFlight},
	{"Expired/FarFuture", checkExpiresFarAhead},
	{"Renew/ExtendsLease", checkRenewExtends},
	{"Renew/StaleOwner", checkRenewStale},
	{"Renew/NeverShortens", checkRenewNeverShortens},
	{"RenewBatch/OnlyHeldLeases", checkRenewBatch},
	{"Complete/RoundTrip", checkCompleteRoundTrip},
	{"Complete/RoundTrip-1MiB", checkCompleteLarge},
	{"Complete/CopiesResponse", checkCompleteCopies},
	{"Complete/StaleOwner", checkCompleteStale},
	{"Complete/Twice", checkCompleteTwice},
	{"Release/AllowsRetry", checkReleaseAllowsRetry},
	{"Release/StaleOwner", checkReleaseStale},
	{"Release/Completed", checkReleaseCompleted},
	{"Get/NotFound", checkGetNotFound},
	{"Purge/Batched", checkPurgeBatched},
	{"Purge/KeepsLive", checkPurgeKeepsLive},
	{"Purge/AtExpiry", checkPurgeAtExpiry},
	{"Context/Canceled", checkCanceled},
	{"Concurrent/OneWinner", checkConcurrentOneWinner},
	{"Concurrent/OneTakeover", checkConcurrentOneTakeover},
}

// t0 is a fixed time in whole milliseconds, so stores that keep millisecond
// or microsecond precision return exactly what they were given.
var t0 = time.Date(2031, 3, 14, 15, 9, 26, 535_000_000, time.UTC)

const (
	lease = 30 * time.Second
	ttl   = 24 * time.Hour
)

var (
	fpA = idem.Fingerprint{0: 'a', 31: 1}
	fpB = idem.Fingerprint{0: 'b', 31: 2}
)

func acquireAt(id idem.ID, fp idem.Fingerprint, token string, now time.Time) idem.Acquire {
	return idem.Acquire{ID: id, Fingerprint: fp, Token: token, Now: now,
		LeaseUntil: now.Add(lease), ExpiresAt: now.Add(ttl)}
}

// acquire calls Store.Acquire and checks the outcome.
func acquire(ctx context.Context, s idem.Store, a idem.Acquire, want idem.AcquireOutcome) (idem.Record, error) {
	rec, got, err := s.Acquire(ctx, a)
	if err != nil {
		return rec, fmt.Errorf("Acquire(%q, token %q): %w", a.ID.Key, a.Token, err)
	}
	if got != want {
		return rec, fmt.Errorf("Acquire(%q, token %q) = %v, want %v", a.ID.Key, a.Token, got, want)
	}
	return rec, nil
}

func wantErr(op string, err, target error) error {
	if !errors.Is(err, target) {
		return fmt.Errorf("%s: got error %v, want %v", op, err, target)
	}
	return nil
}

// sameTime allows for stores that keep less than nanosecond precision.
func sameTime(a, b time.Time) bool {
	d := a.Sub(b)
	return d < time.Millisecond && d > -time.Millisecond
}

func checkRecord(rec idem.Record, a idem.Acquire) error {
	switch {
	case rec.ID != a.ID:
		return fmt.Errorf("record ID = %+v, want %+v", rec.ID, a.ID)
	case rec.State != idem.InFlight:
		return fmt.Errorf("record state = %v, want in-flight", rec.State)
	case rec.Token != a.Token:
		return fmt.Errorf("record token = %q, want %q", rec.Token, a.Token)
	case rec.Fingerprint != a.Fingerprint:
		return fmt.Errorf("record fingerprint = %v, want %v", rec.Fingerprint, a.Fingerprint)
	case !sameTime(rec.LeaseUntil, a.LeaseUntil):
		return fmt.Errorf("record lease until %v, want %v", rec.LeaseUntil, a.LeaseUntil)
	case !sameTime(rec.ExpiresAt, a.ExpiresAt):
		return fmt.Errorf("record expires at %v, want %v", rec.ExpiresAt, a.ExpiresAt)
	}
	return nil
}

func checkAcquireNew(ctx context.Context, s idem.Store) error {
	a := acquireAt(idem.ID{Scope: "acct_1", Key: "k-new"}, fpA, "tok-1", t0)
	rec, err := acquire(ctx, s, a, idem.AcquireCreated)
	if err != nil {
		return err
	}
	if err := checkRecord(rec, a); err != nil {
		return fmt.Errorf("Acquire returned: %w", err)
	}
	got, err := s.Get(ctx, a.ID)
	if err != nil {
		return fmt.Errorf("Get after Acquire: %w", err)
	}
	if err := checkRecord(got, a); err != nil {
		return fmt.Errorf("Get returned: %w", err)
	}
	return nil
}

func checkAcquireInFlight(ctx context.Context, s idem.Store) error {
	id := idem.ID{Key: "k-busy"}
	first := acquireAt(id, fpA, "tok-1", t0)
	if _, err := acquire(ctx, s, first, idem.AcquireCreated); err != nil {
		return err
	}
	// Just before the lease runs out, with either fingerprint.
	for _, fp := range []idem.Fingerprint{fpA, fpB} {
		rec, err := acquire(ctx, s, acquireAt(id, fp, "tok-2", t0.Add(lease-time.Millisecond)), idem.AcquireExisting)
		if err != nil {
			return err
		}
		if err := checkRecord(rec, first); err != nil {
			return fmt.Errorf("the existing record: %w", err)
		}
	}
	return nil
}

func checkTakeoverAfterLease(ctx context.Context, s idem.Store) error {
	id := idem.ID{Key: "k-crashed"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-dead", t0), idem.AcquireCreated); err != nil {
		return err
	}
	next := acquireAt(id, fpA, "tok-next", t0.Add(lease))
	rec, err := acquire(ctx, s, next, idem.AcquireTookOver)
	if err != nil {
		return err
	}
	if err := checkRecord(rec, next); err != nil {
		return fmt.Errorf("taken-over record: %w", err)
	}
	// What the store kept, not only what it answered: a record still
	// holding the crashed holder's token would let it complete.
	got, err := s.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("Get after the takeover: %w", err)
	}
	if err := checkRecord(got, next); err != nil {
		return fmt.Errorf("Get after the takeover: %w", err)
	}
	return nil
}

func checkNoTakeoverOtherFingerprint(ctx context.Context, s idem.Store) error {
	id := idem.ID{Key: "k-reused"}
	first := acquireAt(id, fpA, "tok-1", t0)
	if _, err := acquire(ctx, s, first, idem.AcquireCreated); err != nil {
		return err
	}
	rec, err := acquire(ctx, s, acquireAt(id, fpB, "tok-2", t0.Add(2*lease)), idem.AcquireExisting)
	if err != nil {
		return fmt.Errorf("a lapsed lease must not go to another payload: %w", err)
	}
	return checkRecord(rec, first)
}

func sampleResponse() exchange.Response {
	return exchange.Response{
		Status: 201,
		Header: []exchange.HeaderField{
			{Name: "Content-Type", Values: []string{"application/json"}},
			{Name: "Location", Values: []string{"/v1/charges/ch_1"}},
			{Name: "Link", Values: []string{"</a>; rel=a", "</b>; rel=b"}},
		},
		Body: []byte(`{"id":"ch_1","amount":1999}`),
	}
}

func completeAt(ctx context.Context, s idem.Store, id idem.ID, token string, resp exchange.Response, now time.Time) error {
	err := s.Complete(ctx, id, token, idem.Completion{Response: resp, CompletedAt: now, ExpiresAt: now.Add(ttl)})
	if err != nil {
		return fmt.Errorf("Complete(%q, token %q): %w", id.Key, token, err)
	}
	return nil
}

func checkResponse(got, want exchange.Response) error {
	if got.Status != want.Status {
		return fmt.Errorf("stored status = %d, want %d", got.Status, want.Status)
	}
	if !bytes.Equal(got.Body, want.Body) {
		return fmt.Errorf("stored body differs: %d bytes, want %d", len(got.Body), len(want.Body))
	}
	// The order of the header fields is kept: it is part of what is replayed.
	if len(got.Header) != len(want.Header) {
		return fmt.Errorf("stored header = %v, want %v", got.Header, want.Header)
	}
	for i, f := range want.Header {
		if g := got.Header[i]; g.Name != f.Name || !slices.Equal(g.Values, f.Values) {
			return fmt.Errorf("stored header %d = %s %q, want %s %q", i, g.Name, g.Values, f.Name, f.Values)
		}
	}
	return nil
}

func checkAcquireCompleted(ctx context.Context, s idem.Store) error {
	id := idem.ID{Key: "k-done"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-1", t0), idem.AcquireCreated); err != nil {
		return err
	}
	want := sampleResponse()
	if err := completeAt(ctx, s, id, "tok-1", want, t0.Add(time.Second)); err != nil {
		return err
	}
	// Long after the lease, well within the TTL: the record still answers.
	rec, err := acquire(ctx, s, acquireAt(id, fpA, "tok-2", t0.Add(time.Hour)), idem.AcquireExisting)
	if err != nil {
		return err
	}
	if rec.State != idem.Completed || rec.Fingerprint != fpA {
		return fmt.Errorf("record = state %v fingerprint %v, want completed with the original fingerprint", rec.State, rec.Fingerprint)
	}
	if !sameTime(rec.ExpiresAt, t0.Add(time.Second+ttl)) || !sameTime(rec.CompletedAt, t0.Add(time.Second)) {
		return fmt.Errorf("completed at %v expires at %v, want %v and %v", rec.CompletedAt, rec.ExpiresAt, t0.Add(time.Second), t0.Add(time.Second+ttl))
	}
	return checkResponse(rec.Response, want)
}

func checkScopesApart(ctx context.Context, s idem.Store) error {
	for _, scope := range []string{"acct_a", "acct_b", ""} {
		id := idem.ID{Scope: scope, Key: "shared-key"}
		if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-"+scope, t0), idem.AcquireCreated); err != nil {
			return fmt.Errorf("scope %q: %w", scope, err)
		}
	}
	rec, err := s.Get(ctx, idem.ID{Scope: "acct_b", Key: "shared-key"})
	if err != nil || rec.Token != "tok-acct_b" {
		return fmt.Errorf("Get in scope acct_b = token %q, %v; want tok-acct_b", rec.Token, err)
	}
	// Where the scope ends is part of the ID: a store that runs scope and
	// key together, with or without a separator, gives tenant "acct:1"
	// the records of tenant "acct".
	for i, sep := range []string{"", ":", "/", "|", "#", "-", "_", ".", " ", "\x00"} {
		pair := []idem.ID{{Scope: "acct" + sep + "1", Key: "k"}, {Scope: "acct", Key: "1" + sep + "k"}}
		for j, id := range pair {
			if _, err := acquire(ctx, s, acquireAt(id, fpA, fmt.Sprintf("tok-%d-%d", i, j), t0), idem.AcquireCreated); err != nil {
				return fmt.Errorf("scope %q and key %q are another ID than scope %q and key %q: %w",
					id.Scope, id.Key, pair[1-j].Scope, pair[1-j].Key, err)
			}
		}
	}
	return nil
}

func checkExpiredCompleted(ctx context.Context, s idem.Store) error {
	id := idem.ID{Key: "k-old"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-1", t0), idem.AcquireCreated); err != nil {
		return err
	}
	if err := completeAt(ctx, s, id, "tok-1", sampleResponse(), t0); err != nil {
		return err
	}
	if _, err := acquire(ctx, s, acquireAt(id, fpB, "tok-2", t0.Add(ttl-time.Millisecond)), idem.AcquireExisting); err != nil {
		return fmt.Errorf("just before expiry: %w", err)
	}
	// Expired: a new request, whatever its payload.
	next := acquireAt(id, fpB, "tok-3", t0.Add(ttl))
	rec, err := acquire(ctx, s, next, idem.AcquireCreated)
	if err != nil {
		return fmt.Errorf("at expiry: %w", err)
	}
	return checkRecord(rec, next)
}

// checkExpiresFarAhead holds a store to the longest TTL and lease the
// Engine accepts: a record that expires, or a lease that ends, MaxTTL from
// now is live now, not taken for one in the past.
func checkExpiresFarAhead(ctx context.Context, s idem.Store) error {
	id, held := idem.ID{Key: "k-forever"}, idem.ID{Key: "k-long-lease"}
	a := idem.Acquire{ID: id, Fingerprint: fpA, Token: "tok-1", Now: t0, LeaseUntil: t0.Add(idem.MaxDuration), ExpiresAt: t0.Add(idem.MaxDuration)}
	if _, err := acquire(ctx, s, a, idem.AcquireCreated); err != nil {
		return err
	}
	if err := s.Complete(ctx, id, "tok-1", idem.Completion{Response: sampleResponse(), CompletedAt: t0, ExpiresAt: t0.Add(idem.MaxDuration)}); err != nil {
		return fmt.Errorf("Complete: %w", err)
	}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-2", t0.Add(time.Hour)), idem.AcquireExisting); err != nil {
		return fmt.Errorf("a record expiring MaxTTL ahead, an hour later: %w", err)
	}
	h := idem.Acquire{ID: held, Fingerprint: fpA, Token: "tok-3", Now: t0, LeaseUntil: t0.Add(idem.MaxDuration), ExpiresAt: t0.Add(idem.MaxDuration)}
	if _, err := acquire(ctx, s, h, idem.AcquireCreated); err != nil {
		return err
	}
	if _, err := acquire(ctx, s, acquireAt(held, fpA, "tok-4", t0.Add(time.Hour)), idem.AcquireExisting); err != nil {
		return fmt.Errorf("a lease ending MaxLease ahead, an hour later: %w", err)
	}
	if n, err := s.Purge(ctx, t0.Add(time.Hour), 10); err != nil || n != 0 {
		return fmt.Errorf("Purge an hour later = %d, %v; want nothing purged", n, err)
	}
	return nil
}

// checkPurgeAtExpiry: a completed record is purged from the instant it
// expires (now == ExpiresAt), and not a moment before.
func checkPurgeAtExpiry(ctx context.Context, s idem.Store) error {
	id := idem.ID{Key: "k-boundary"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-1", t0), idem.AcquireCreated); err != nil {
		return err
	}
	if err := completeAt(ctx, s, id, "tok-1", sampleResponse(), t0); err != nil {
		return err
	}
	if n, err := s.Purge(ctx, t0.Add(ttl-time.Millisecond), 10); err != nil || n != 0 {
		return fmt.Errorf("Purge a millisecond before expiry = %d, %v; want nothing purged", n, err)
	}
	if n, err := s.Purge(ctx, t0.Add(ttl), 10); err != nil || n != 1 {
		return fmt.Errorf("Purge at the instant of expiry = %d, %v; want the record purged", n, err)
	}
	if _, err := s.Get(ctx, id); !errors.Is(err, idem.ErrNotFound) {
		return fmt.Errorf("Get after the purge: %v, want ErrNotFound", err)
	}
	return nil
}

func checkExpiredInFlight(ctx context.Context, s idem.Store) error {
	id := idem.ID{Key: "k-abandoned"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-1", t0), idem.AcquireCreated); err != nil {
		return err
	}
	next := acquireAt(id, fpB, "tok-2", t0.Add(ttl))
	rec, err := acquire(ctx, s, next, idem.AcquireCreated)
	if err != nil {
		return fmt.Errorf("an abandoned in-flight record past its TTL is free for any payload: %w", err)
	}
	if err := checkRecord(rec, next); err != nil {
		return err
	}
	// A holder that still renews its lease keeps its key past the TTL,
	// whatever payload asks for it (Record.Expired).
	held := idem.ID{Key: "k-marathon-held"}
	if _, err := acquire(ctx, s, acquireAt(held, fpA, "tok-3", t0), idem.AcquireCreated); err != nil {
		return err
	}
	if err := s.Renew(ctx, held, "tok-3", t0.Add(ttl+time.Hour)); err != nil {
		return fmt.Errorf("Renew: %w", err)
	}
	if _, err := acquire(ctx, s, acquireAt(held, fpB, "tok-4", t0.Add(ttl+time.Minute)), idem.AcquireExisting); err != nil {
		return fmt.Errorf("a renewed lease past the TTL still holds the key: %w", err)
	}
	return nil
}

func checkRenewExtends(ctx context.Context, s idem.Store) error {
	id := idem.ID{Key: "k-slow"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-1", t0), idem.AcquireCreated); err != nil {
		return err
	}
	if err := s.Renew(ctx, id, "tok-1", t0.Add(2*lease)); err != nil {
		return fmt.Errorf("Renew by the owner: %w", err)
	}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-2", t0.Add(lease)), idem.AcquireExisting); err != nil {
		return fmt.Errorf("after renewal the holder keeps the key past the first lease: %w", err)
	}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-3", t0.Add(2*lease)), idem.AcquireTookOver); err != nil {
		return fmt.Errorf("the renewed lease ends when it says: %w", err)
	}
	return nil
}

// takenOver leaves id held by "tok-new" after "tok-old" lost its lease.
func takenOver(ctx context.Context, s idem.Store, id idem.ID) error {
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-old", t0), idem.AcquireCreated); err != nil {
		return err
	}
	_, err := acquire(ctx, s, acquireAt(id, fpA, "tok-new", t0.Add(lease+time.Second)), idem.AcquireTookOver)
	return err
}

func checkRenewStale(ctx context.Context, s idem.Store) error {
	id := idem.ID{Key: "k-renew-stale"}
	if err := takenOver(ctx, s, id); err != nil {
		return err
	}
	if err := wantErr("Renew by the stale owner", s.Renew(ctx, id, "tok-old", t0.Add(time.Hour)), idem.ErrLockLost); err != nil {
		return err
	}
	if err := wantErr("Renew of a missing record", s.Renew(ctx, idem.ID{Key: "nope"}, "tok-old", t0), idem.ErrLockLost); err != nil {
		return err
	}
	rec, err := s.Get(ctx, id)
	if err != nil || rec.Token != "tok-new" || !sameTime(rec.LeaseUntil, t0.Add(2*lease+time.Second)) {
		return fmt.Errorf("after a stale Renew the record is token %q lease %v (%v), want tok-new's untouched", rec.Token, rec.LeaseUntil, err)
	}
	// The token that completed a record holds no lease any more.
	done := idem.ID{Key: "k-renew-done"}
	if _, err := acquire(ctx, s, acquireAt(done, fpA, "tok-done", t0), idem.AcquireCreated); err != nil {
		return err
	}
	if err := completeAt(ctx, s, done, "tok-done", sampleResponse(), t0); err != nil {
		return err
	}
	return wantErr("Renew of a completed record by the token that completed it", s.Renew(ctx, done, "tok-done", t0.Add(time.Hour)), idem.ErrLockLost)
}

func checkCompleteRoundTrip(ctx context.Context, s idem.Store) error {
	cases := []exchange.Response{
		sampleResponse(),
		{Status: 204, Body: []byte{}},
		{Status: 400, Header: []exchange.HeaderField{{Name: "Content-Type", Values: []string{"application/problem+json"}}}, Body: []byte(`{"title":"bad"}`)},
	}
	for i, want := range cases {
		id := idem.ID{Scope: "s", Key: fmt.Sprintf("k-rt-%d", i)}
		if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok", t0), idem.AcquireCreated); err != nil {
			return err
		}
		if err := completeAt(ctx, s, id, "tok", want, t0); err != nil {
			return err
		}
		got, err := s.Get(ctx, id)
		if err != nil {
			return fmt.Errorf("Get: %w", err)
		}
		if got.State != idem.Completed {
			return fmt.Errorf("state after Complete = %v", got.State)
		}
		if err := checkResponse(got.Response, want); err != nil {
			return fmt.Errorf("status %d: %w", want.Status, err)
		}
	}
	return nil
}

// checkCompleteCopies: the Engine reuses the memory of the response it
// hands to Complete, so the store must have copied what it keeps.
func checkCompleteCopies(ctx context.Context, s idem.Store) error {
	id := idem.ID{Scope: "s", Key: "k-copies"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok", t0), idem.AcquireCreated); err != nil {
		return err
	}
	lent := sampleResponse()
	if err := completeAt(ctx, s, id, "tok", lent, t0); err != nil {
		return err
	}
	for i := range lent.Body {
		lent.Body[i] = 'x'
	}
	for i := range lent.Header {
		for j := range lent.Header[i].Values {
			lent.Header[i].Values[j] = "reused" // the handler's own value arrays are lent too
		}
		lent.Header[i] = exchange.HeaderField{Name: "X-Reused", Values: []string{"reused"}}
	}
	got, err := s.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("Get: %w", err)
	}
	if err := checkResponse(got.Response, sampleResponse()); err != nil {
		return fmt.Errorf("after the caller reused its memory: %w", err)
	}
	return nil
}

func checkCompleteLarge(ctx context.Context, s idem.Store) error {
	body := make([]byte, 1<<20)
	for i := range body {
		body[i] = byte(i*7 + i>>9) // every byte value, not compressible to nothing
	}
	want := exchange.Response{Status: 200, Header: []exchange.HeaderField{{Name: "Content-Type", Values: []string{"application/octet-stream"}}}, Body: body}
	id := idem.ID{Key: "k-large"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok", t0), idem.AcquireCreated); err != nil {
		return err
	}
	if err := completeAt(ctx, s, id, "tok", want, t0); err != nil {
		return err
	}
	rec, err := acquire(ctx, s, acquireAt(id, fpA, "tok-2", t0.Add(time.Minute)), idem.AcquireExisting)
	if err != nil {
		return err
	}
	return checkResponse(rec.Response, want)
}

func checkCompleteStale(ctx context.Context, s idem.Store) error {
	id := idem.ID{Key: "k-fenced"}
	if err := takenOver(ctx, s, id); err != nil {
		return err
	}
	stale := exchange.Response{Status: 201, Body: []byte("stale")}
	if err := wantErr("Complete by the stale owner", s.Complete(ctx, id, "tok-old", idem.Completion{Response: stale, CompletedAt: t0, ExpiresAt: t0.Add(ttl)}), idem.ErrLockLost); err != nil {
		return err
	}
	rec, err := s.Get(ctx, id)
	if err != nil || rec.State != idem.InFlight || rec.Token != "tok-new" {
		return fmt.Errorf("after a stale Complete the record is %v token %q (%v), want in-flight held by tok-new", rec.State, rec.Token, err)
	}
	want := sampleResponse()
	if err := completeAt(ctx, s, id, "tok-new", want, t0.Add(lease+2*time.Second)); err != nil {
		return fmt.Errorf("the new owner completes: %w", err)
	}
	rec, err = s.Get(ctx, id)
	if err != nil {
		return err
	}
	if err := checkResponse(rec.Response, want); err != nil {
		return err
	}
	return checkCompleteGone(ctx, s)
}

// checkCompleteGone: a holder whose record is gone (released, or purged
// once its lease and TTL ran out) completes nothing, and writes no record.
func checkCompleteGone(ctx context.Context, s idem.Store) error {
	gone := idem.ID{Key: "k-fenced-gone"}
	if _, err := acquire(ctx, s, acquireAt(gone, fpA, "tok-gone", t0), idem.AcquireCreated); err != nil {
		return err
	}
	if err := s.Release(ctx, gone, "tok-gone"); err != nil {
		return fmt.Errorf("Release: %w", err)
	}
	c := idem.Completion{Response: sampleResponse(), CompletedAt: t0, ExpiresAt: t0.Add(ttl)}
	if err := wantErr("Complete of a released record", s.Complete(ctx, gone, "tok-gone", c), idem.ErrLockLost); err != nil {
		return err
	}
	if _, err := s.Get(ctx, gone); !errors.Is(err, idem.ErrNotFound) {
		return fmt.Errorf("Get after a Complete of a released record: %v, want ErrNotFound", err)
	}
	return nil
}

func checkCompleteTwice(ctx context.Context, s idem.Store) error {
	id := idem.ID{Key: "k-twice"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok", t0), idem.AcquireCreated); err != nil {
		return err
	}
	want := sampleResponse()
	if err := completeAt(ctx, s, id, "tok", want, t0); err != nil {
		return err
	}
	again := idem.Completion{Response: exchange.Response{Status: 500}, CompletedAt: t0, ExpiresAt: t0.Add(ttl)}
	if err := wantErr("second Complete", s.Complete(ctx, id, "tok", again), idem.ErrLockLost); err != nil {
		return err
	}
	rec, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	return checkResponse(rec.Response, want)
}

func checkReleaseAllowsRetry(ctx context.Context, s idem.Store) error {
	id := idem.ID{Key: "k-5xx"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-1", t0), idem.AcquireCreated); err != nil {
		return err
	}
	if err := s.Release(ctx, id, "tok-1"); err != nil {
		return fmt.Errorf("Release by the owner: %w", err)
	}
	if _, err := s.Get(ctx, id); !errors.Is(err, idem.ErrNotFound) {
		return fmt.Errorf("Get after Release: %v, want ErrNotFound", err)
	}
	_, err := acquire(ctx, s, acquireAt(id, fpA, "tok-2", t0.Add(time.Millisecond)), idem.AcquireCreated)
	return err
}

func checkReleaseStale(ctx context.Context, s idem.Store) error {
	id := idem.ID{Key: "k-release-stale"}
	if err := takenOver(ctx, s, id); err != nil {
		return err
	}
	if err := wantErr("Release by the stale owner", s.Release(ctx, id, "tok-old"), idem.ErrLockLost); err != nil {
		return err
	}
	if rec, err := s.Get(ctx, id); err != nil || rec.Token != "tok-new" {
		return fmt.Errorf("after a stale Release the record is token %q (%v), want tok-new's", rec.Token, err)
	}
	return nil
}

func checkReleaseCompleted(ctx context.Context, s idem.Store) error {
	id := idem.ID{Key: "k-release-done"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok", t0), idem.AcquireCreated); err != nil {
		return err
	}
	if err := completeAt(ctx, s, id, "tok", sampleResponse(), t0); err != nil {
		return err
	}
	if err := wantErr("Release of a completed record", s.Release(ctx, id, "tok"), idem.ErrLockLost); err != nil {
		return err
	}
	if rec, err := s.Get(ctx, id); err != nil || rec.State != idem.Completed {
		return fmt.Errorf("a completed record must survive Release: %v, %v", rec.State, err)
	}
	return nil
}

func checkGetNotFound(ctx context.Context, s idem.Store) error {
	_, err := s.Get(ctx, idem.ID{Scope: "x", Key: "never-used"})
	return wantErr("Get of a missing record", err, idem.ErrNotFound)
}

func checkPurgeBatched(ctx context.Context, s idem.Store) error {
	const expired, live, batch = 25, 5, 10
	for i := range expired + live {
		id := idem.ID{Scope: "p", Key: fmt.Sprintf("k-purge-%02d", i)}
		at := t0
		if i >= expired {
			at = t0.Add(time.Hour) // completes later, so outlives the purge time
		}
		if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok", at), idem.AcquireCreated); err != nil {
			return err
		}
		if err := completeAt(ctx, s, id, "tok", sampleResponse(), at); err != nil {
			return err
		}
	}
	purgeAt := t0.Add(ttl + time.Minute)
	var got []int
	for range 5 {
		n, err := s.Purge(ctx, purgeAt, batch)
		if err != nil {
			return fmt.Errorf("Purge: %w", err)
		}
		if n > batch {
			return fmt.Errorf("Purge(limit %d) deleted %d records", batch, n)
		}
		got = append(got, n)
		if n == 0 {
			break
		}
	}
	total := 0
	for _, n := range got {
		total += n
	}
	if total != expired || got[len(got)-1] != 0 {
		return fmt.Errorf("Purge batches deleted %v, want %d in all in batches of at most %d", got, expired, batch)
	}
	for i := range expired + live {
		_, err := s.Get(ctx, idem.ID{Scope: "p", Key: fmt.Sprintf("k-purge-%02d", i)})
		if i < expired && !errors.Is(err, idem.ErrNotFound) {
			return fmt.Errorf("expired record %d survived the purge (%v)", i, err)
		}
		if i >= expired && err != nil {
			return fmt.Errorf("live record %d: %w", i, err)
		}
	}
	return nil
}

// checkPurgeKeepsLive: Purge deletes only expired records (Record.Expired).
// An in-flight record whose lease ran out still holds its key against
// other payloads until its TTL; one whose holder still renews its lease
// holds it past its TTL.
func checkPurgeKeepsLive(ctx context.Context, s idem.Store) error {
	marathon, lapsedLease := idem.ID{Key: "k-marathon"}, idem.ID{Key: "k-lapsed"}
	for _, id := range []idem.ID{marathon, lapsedLease} {
		if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok", t0), idem.AcquireCreated); err != nil {
			return err
		}
	}
	if n, err := s.Purge(ctx, t0.Add(2*lease), 100); err != nil || n != 0 {
		return fmt.Errorf("Purge deleted %d (%v), want 0: an in-flight record whose lease ran out holds its key until its TTL", n, err)
	}
	if err := s.Renew(ctx, marathon, "tok", t0.Add(ttl+time.Hour)); err != nil {
		return err
	}
	if n, err := s.Purge(ctx, t0.Add(ttl+time.Minute), 100); err != nil || n != 1 {
		return fmt.Errorf("Purge deleted %d (%v), want 1: the record past its TTL and lease, not the one whose holder still renews its lease", n, err)
	}
	if _, err := s.Get(ctx, lapsedLease); !errors.Is(err, idem.ErrNotFound) {
		return fmt.Errorf("Get of the record past its TTL and lease after Purge: %v, want ErrNotFound", err)
	}
	_, err := s.Get(ctx, marathon)
	return err
}

func checkCanceled(ctx context.Context, s idem.Store) error {
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	id := idem.ID{Key: "k-canceled"}
	if _, _, err := s.Acquire(canceled, acquireAt(id, fpA, "tok", t0)); err == nil {
		return errors.New("Acquire with a canceled context succeeded")
	}
	// Nothing was written: the key is free.
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok", t0), idem.AcquireCreated); err != nil {
		return fmt.Errorf("after a canceled Acquire: %w", err)
	}
	ops := map[string]error{
		"Renew":    s.Renew(canceled, id, "tok", t0.Add(time.Hour)),
		"Complete": s.Complete(canceled, id, "tok", idem.Completion{Response: sampleResponse(), CompletedAt: t0, ExpiresAt: t0.Add(ttl)}),
		"Release":  s.Release(canceled, id, "tok"),
	}
	for op, err := range ops {
		if err == nil || errors.Is(err, idem.ErrLockLost) {
			return fmt.Errorf("%s with a canceled context: got %v, want the context's error", op, err)
		}
	}
	if _, err := s.Get(canceled, id); err == nil {
		return errors.New("Get with a canceled context succeeded")
	}
	if _, err := s.Purge(canceled, t0.Add(2*ttl), 10); err == nil {
		return errors.New("Purge with a canceled context succeeded")
	}
	rec, err := s.Get(ctx, id)
	if err != nil || rec.State != idem.InFlight || !sameTime(rec.LeaseUntil, t0.Add(lease)) {
		return fmt.Errorf("canceled calls changed the record: %v %v (%v)", rec.State, rec.LeaseUntil, err)
	}
	return nil
}

// race runs f from n goroutines released at once and collects their
// outcomes, until ctx ends: a store whose calls hang fails the check
// instead of holding the test binary until its deadline.
func race(ctx context.Context, n int, f func(i int) (idem.AcquireOutcome, string, error)) (map[idem.AcquireOutcome]int, map[string]bool, error) {
	type answer struct {
		outcome idem.AcquireOutcome
		holder  string
		err     error
	}
	answers := make(chan answer, n) // never blocks a caller, even after a timeout
	start := make(chan struct{})
	for i := range n {
		go func() {
			<-start
			o, holder, err := f(i)
			answers <- answer{o, holder, err}
		}()
	}
	close(start)
	outcomes, holders := map[idem.AcquireOutcome]int{}, map[string]bool{}
	var firstErr error
	for range n {
		select {
		case a := <-answers:
			if a.err != nil && firstErr == nil {
				firstErr = a.err
			}
			outcomes[a.outcome]++
			holders[a.holder] = true
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("%d concurrent calls, not all returned: %w", n, ctx.Err())
		}
	}
	return outcomes, holders, firstErr
}

func checkConcurrentOneWinner(ctx context.Context, s idem.Store) error {
	const n = 100
	id := idem.ID{Scope: "race", Key: "k-race"}
	outcomes, holders, err := race(ctx, n, func(i int) (idem.AcquireOutcome, string, error) {
		rec, o, err := s.Acquire(ctx, acquireAt(id, fpA, fmt.Sprintf("tok-%d", i), t0))
		return o, rec.Token, err
	})
	if err != nil {
		return err
	}
	if outcomes[idem.AcquireCreated] != 1 || outcomes[idem.AcquireExisting] != n-1 || len(holders) != 1 {
		return fmt.Errorf("%d concurrent acquirers: outcomes %v, holders seen %d; want exactly one winner that all others see", n, outcomes, len(holders))
	}
	return nil
}

func checkConcurrentOneTakeover(ctx context.Context, s idem.Store) error {
	const n = 100
	id := idem.ID{Scope: "race", Key: "k-race-takeover"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-dead", t0), idem.AcquireCreated); err != nil {
		return err
	}
	later := t0.Add(lease + time.Second)
	outcomes, holders, err := race(ctx, n, func(i int) (idem.AcquireOutcome, string, error) {
		rec, o, err := s.Acquire(ctx, acquireAt(id, fpA, fmt.Sprintf("tok-%d", i), later))
		return o, rec.Token, err
	})
	if err != nil {
		return err
	}
	if outcomes[idem.AcquireTookOver] != 1 || outcomes[idem.AcquireExisting] != n-1 || len(holders) != 1 {
		return fmt.Errorf("%d concurrent takeovers: outcomes %v, holders seen %d; want exactly one", n, outcomes, len(holders))
	}
	return nil
}
