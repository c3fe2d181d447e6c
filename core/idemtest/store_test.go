package idemtest

import (
	"context"
	"strings"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
)

// brokenStore is a store with one mistake a store author is likely to
// make, which check must catch, failing with an error that contains
// caught: a check that fails for another reason does not count.
type brokenStore struct {
	check  string
	name   string
	caught string
	broken func(*memstore.Store) idem.Store
}

// brokenStores: each store below (broken_test.go) breaks one clause of
// the Store contract on top of the memory store.
var brokenStores = []brokenStore{
	{"Acquire/New", "ForgetsFingerprint", "fingerprint",
		func(s *memstore.Store) idem.Store { return forgetsFingerprint{s} }},
	{"Acquire/New", "WholeSeconds", "lease until",
		func(s *memstore.Store) idem.Store { return wholeSeconds{s} }},
	{"Acquire/InFlight", "RetryTakesOverLiveLease", "= took-over, want existing",
		func(s *memstore.Store) idem.Store { return retryTakesOver{s} }},
	{"Acquire/TakeoverAfterLease", "NoTakeover", "= existing, want took-over",
		func(s *memstore.Store) idem.Store { return noTakeover{s} }},
	{"Acquire/TakeoverAfterLease", "TakeoverKeepsToken", `record token = "tok-dead"`,
		func(s *memstore.Store) idem.Store { return takeoverKeepsToken{s} }},
	{"Acquire/NoTakeoverWithOtherFingerprint", "TakesOverAnyPayload", "another payload",
		func(s *memstore.Store) idem.Store { return takesOverAnyPayload{s} }},
	{"Acquire/Completed", "ExistingWithoutResponse", "stored status = 0",
		func(s *memstore.Store) idem.Store { return existingWithoutResponse{s} }},
	{"Acquire/ScopesApart", "IgnoresScope", "= existing, want created",
		func(s *memstore.Store) idem.Store {
			return mapsIDs{s, func(id idem.ID) idem.ID { return idem.ID{Key: id.Key} }}
		}},
	{"Acquire/ScopesApart", "JoinsScopeAndKey", "= existing, want created",
		func(s *memstore.Store) idem.Store { return mapsIDs{s, joinScopeAndKey} }},
	{"IDs/AnyBytes", "TruncatesIDs", "= existing, want created",
		func(s *memstore.Store) idem.Store { return mapsIDs{s, truncateID} }},
	{"Expired/Completed", "CompletedNeverExpire", "at expiry",
		func(s *memstore.Store) idem.Store { return completedNeverExpire{s} }},
	{"Expired/InFlight", "InFlightNeverExpire", "free for any payload",
		func(s *memstore.Store) idem.Store { return inFlightNeverExpire{s} }},
	{"Expired/InFlight", "ExpiresRenewedLease", "renewed lease",
		func(s *memstore.Store) idem.Store { return expiresRenewedLease{s} }},
	{"Expired/FarFuture", "Seconds32", "MaxTTL ahead",
		func(s *memstore.Store) idem.Store { return seconds32{s} }},
	{"Renew/ExtendsLease", "RenewsExpiry", "keeps the key past the first lease",
		func(s *memstore.Store) idem.Store { return renewsExpiry{s} }},
	{"Renew/StaleOwner", "RenewsAnyToken", "Renew by the stale owner",
		func(s *memstore.Store) idem.Store { return renewsAnyToken{s} }},
	{"Renew/StaleOwner", "RenewsCompleted", "Renew of a completed record",
		func(s *memstore.Store) idem.Store { return renewsCompleted{s} }},
	{"Renew/NeverShortens", "MovesLeaseBack", "moved the lease back",
		func(s *memstore.Store) idem.Store { return movesLeaseBack{s} }},
	{"RenewBatch/OnlyHeldLeases", "BatchWithoutFencing", "RenewBatch: lost[1]",
		func(s *memstore.Store) idem.Store { return batchWithoutFencing{s} }},
	{"Complete/RoundTrip", "HeaderAsMap", "stored header 1",
		func(s *memstore.Store) idem.Store { return headerAsMap{s} }},
	{"Complete/RoundTrip-1MiB", "Body64KiB", "stored body differs",
		func(s *memstore.Store) idem.Store { return body64KiB{s} }},
	{"Complete/CopiesResponse", "KeepsLentResponse", "after the caller reused its memory",
		func(s *memstore.Store) idem.Store { return &keepsLentResponse{Store: s} }},
	{"Complete/StaleOwner", "NoFencing", "Complete by the stale owner",
		func(s *memstore.Store) idem.Store { return noFencing{s} }},
	{"Complete/StaleOwner", "CompletesGoneRecord", "Complete of a released record",
		func(s *memstore.Store) idem.Store { return completesGoneRecord{s} }},
	{"Complete/Twice", "CompletesTwice", "second Complete",
		func(s *memstore.Store) idem.Store { return &completesTwice{Store: s} }},
	{"Release/AllowsRetry", "ReleaseEndsLease", "Get after Release",
		func(s *memstore.Store) idem.Store { return releaseEndsLease{s} }},
	{"Release/StaleOwner", "NoFencing", "Release by the stale owner",
		func(s *memstore.Store) idem.Store { return noFencing{s} }},
	{"Release/Completed", "ReleasesCompleted", "Release of a completed record",
		func(s *memstore.Store) idem.Store { return &releasesCompleted{Store: s} }},
	{"Get/NotFound", "EmptyRecordForMissing", "Get of a missing record",
		func(s *memstore.Store) idem.Store { return emptyRecordForMissing{s} }},
	{"Purge/Batched", "UnboundedPurge", "Purge(limit 10) deleted",
		func(s *memstore.Store) idem.Store { return unboundedPurge{s} }},
	{"Purge/KeepsLive", "PurgesAtTTL", "still renews its lease",
		func(s *memstore.Store) idem.Store { return newPurgesInFlight(s, expiredIgnoringLease) }},
	{"Purge/KeepsLive", "PurgesLapsedLeases", "holds its key until its TTL",
		func(s *memstore.Store) idem.Store { return newPurgesInFlight(s, leaseLapsed) }},
	{"Purge/AtExpiry", "PurgesLate", "at the instant of expiry",
		func(s *memstore.Store) idem.Store { return purgesLate{s} }},
	{"Context/Canceled", "IgnoresContext", "Acquire with a canceled context succeeded",
		func(s *memstore.Store) idem.Store { return ignoresContext{s} }},
	{"Concurrent/OneWinner", "ReadThenWrite", "want exactly one winner",
		func(s *memstore.Store) idem.Store { return newReadThenWrite(s) }},
	{"Concurrent/OneTakeover", "ReadThenTakeOver", "concurrent takeovers",
		func(s *memstore.Store) idem.Store { return newReadThenTakeOver(s) }},
	{"Admin/Forget/NotFound", "ForgetMissingSucceeds", "Forget of a missing record",
		func(s *memstore.Store) idem.Store { return forgetMissingSucceeds{s} }},
	{"Admin/Forget/InFlightNeedsForce", "ForgetIgnoresForce", "without force",
		func(s *memstore.Store) idem.Store { return forgetIgnoresForce{s} }},
	{"Admin/Forget/ForceFencesHolder", "ForgetsCompletedOnly", "Get after a Forget with force",
		func(s *memstore.Store) idem.Store { return forgetsCompletedOnly{s} }},
	{"Admin/Forget/Completed", "ForgetsInFlightOnly", "Get after Forget",
		func(s *memstore.Store) idem.Store { return forgetsInFlightOnly{s} }},
	{"Admin/Forget/ScopesApart", "ForgetIgnoresScope", "another tenant's record",
		func(s *memstore.Store) idem.Store { return newForgetIgnoresScope(s) }},
	{"ForgetFenced/CompletedMeanwhile", "ForgetByKeyAlone", "want ErrChanged",
		func(s *memstore.Store) idem.Store { return newTwoStepForget(s, forgetByKey) }},
	{"ForgetFenced/CompletedMeanwhile", "ForgetIgnoresState", "want ErrChanged",
		func(s *memstore.Store) idem.Store { return newTwoStepForget(s, forgetByToken) }},
	{"ForgetFenced/TakenOverMeanwhile", "ForgetIgnoresToken", "want ErrChanged",
		func(s *memstore.Store) idem.Store { return newTwoStepForget(s, forgetByState) }},
	{"ForgetFenced/RecreatedMeanwhile", "ForgetByKeyAlone", "want ErrChanged",
		func(s *memstore.Store) idem.Store { return newTwoStepForget(s, forgetByKey) }},
	{"ForgetFenced/ReleasedMeanwhile", "ForgetUncounted", "want ErrChanged",
		func(s *memstore.Store) idem.Store {
			f := newTwoStepForget(s, forgetByBoth)
			f.uncounted = true
			return f
		}},
}

// allChecks are the suite's checks by name: TestStore's, its Admin ones
// (run on a store that is an AdminStore), and TestForgetFenced's (on a
// broken store with a hook between Forget's read and its delete).
func allChecks() map[string]func(context.Context, idem.Store) error {
	checks := map[string]func(context.Context, idem.Store) error{}
	for _, c := range storeChecks {
		checks[c.name] = c.check
	}
	for _, c := range adminChecks {
		checks["Admin/"+c.name] = func(ctx context.Context, s idem.Store) error { return c.check(ctx, s.(AdminStore)) }
	}
	for _, c := range fencedForgets {
		checks["ForgetFenced/"+c.name] = func(ctx context.Context, s idem.Store) error {
			return checkForgetChanged(ctx, s.(AdminStore), func(s AdminStore, f func()) { s.(*twoStepForget).between = f }, c)
		}
	}
	return checks
}

// The suite must catch the mistakes a store author is likely to make: a
// check that no broken store fails would pass a store that ignores its
// clause. Every check in storeChecks has at least one broken store here.
func TestStoreSuiteCatchesBrokenStores(t *testing.T) {
	checks := allChecks()
	covered := map[string]bool{}
	for _, b := range brokenStores {
		check, ok := checks[b.check]
		if !ok {
			t.Errorf("broken store %s names no check: %q", b.name, b.check)
			continue
		}
		covered[b.check] = true
		t.Run(b.check+"/"+b.name, func(t *testing.T) {
			s := memstore.New(memstore.WithPurgeInterval(0))
			err := check(context.Background(), b.broken(s))
			switch {
			case err == nil:
				t.Fatalf("check %s passed a store that breaks it", b.check)
			case !strings.Contains(err.Error(), b.caught):
				t.Fatalf("check %s failed for another reason than the broken store's: %v (want %q in it)", b.check, err, b.caught)
			}
			t.Logf("caught: %v", err)
		})
	}
	for name := range checks {
		if !covered[name] {
			t.Errorf("check %s has no broken store in brokenStores that it must catch", name)
		}
	}
}
