package main

import (
	"context"
	"sync/atomic"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// renewCounter counts the renewal calls that reach a store, and passes on
// exactly the capabilities of the store it wraps.
type renewCounter interface {
	idem.Store
	calls() int64
}

type counter struct {
	idem.Store
	n *atomic.Int64
}

func (c counter) calls() int64 { return c.n.Load() }

func (c counter) Renew(ctx context.Context, id idem.ID, token string, until time.Time) error {
	c.n.Add(1)
	return c.Store.Renew(ctx, id, token, until)
}

type batchCounter struct {
	counter
	b idem.BatchRenewer
}

func (c batchCounter) RenewBatch(ctx context.Context, held []idem.Held, until time.Time, lost []bool) error {
	c.n.Add(1)
	return c.b.RenewBatch(ctx, held, until, lost)
}

type localCounter struct{ counter }

func (localCounter) Local() {}

// countRenewals wraps s.
func countRenewals(s idem.Store) renewCounter {
	c := counter{Store: s, n: new(atomic.Int64)}
	_, local := s.(idem.LocalStore)
	if b, ok := s.(idem.BatchRenewer); ok {
		return batchCounter{c, b} // a batch-renewing store is never local here
	}
	if local {
		return localCounter{c}
	}
	return c
}
