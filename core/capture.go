package idem

import (
	"context"

	"github.com/idemkit/idemkit/core/exchange"
)

// AbandonOnPanic, deferred by an adapter around the handler it runs under
// l, abandons l as a panic and lets the panic go on to the framework's
// recovery (or net/http's), which decides what the client sees.
func (l *lock) AbandonOnPanic(ctx context.Context) {
	if p := recover(); p != nil {
		_ = l.Abandon(ctx, exchange.ReasonPanic)
		panic(p)
	}
}
