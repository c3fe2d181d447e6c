package gormstore

import (
	"fmt"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/acquireorder"
)

// On a database server Acquire inserts first while new keys are the
// common case, so that a new key is one statement, and reads first in a
// storm of retries, so that each replay or 409 is one read that writes
// nothing.
func TestServerAcquireOrderFollowsTraffic(t *testing.T) {
	for _, b := range backends[1:] {
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
