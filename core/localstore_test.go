package idem_test

import (
	"context"
	"testing"

	idem "github.com/idemkit/idemkit/core"
)

// deadlineSeen records whether the Acquire it gets carries a deadline.
type deadlineSeen struct {
	idem.Store
	had bool
}

func (s *deadlineSeen) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	_, s.had = ctx.Deadline()
	return s.Store.Acquire(ctx, a)
}

type localDeadlineSeen struct{ *deadlineSeen }

func (localDeadlineSeen) Local() {}

// A store that may wait (any store by default) gets StoreTimeout as a
// deadline; a LocalStore, whose calls cannot wait, is spared the cost.
func TestStoreDeadlineOnlyWhereItCanFire(t *testing.T) {
	remote := &deadlineSeen{Store: newStore(t)}
	idem.New(quietConfig(remote)).Begin(context.Background(), charge("k", `{}`)).Lock.Abandon(context.Background(), idem.ReasonPanic)
	if !remote.had {
		t.Fatal("a store without the LocalStore capability was called without a deadline")
	}
	local := localDeadlineSeen{&deadlineSeen{Store: newStore(t)}}
	idem.New(quietConfig(local)).Begin(context.Background(), charge("k", `{}`)).Lock.Abandon(context.Background(), idem.ReasonPanic)
	if local.had {
		t.Fatal("a LocalStore was given a deadline it can never need")
	}
}
