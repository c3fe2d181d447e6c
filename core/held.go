package idem

import "context"

// heldKey is the context key under which a running handler's Lock is found.
type heldKey struct{}

// HeldKey returns the key the request whose context is ctx holds, with its
// owner token, while that request's handler runs. The token is a fencing
// token: it changes with every holder of the key, so a handler may pass it
// (or the scoped key) downstream, to a payment provider's own idempotency
// key or a conditional write, and the receiver can tell a stale holder from
// the current one. It reports false outside a guarded handler.
func HeldKey(ctx context.Context) (Held, bool) {
	l, ok := ctx.Value(heldKey{}).(*Lock)
	if !ok {
		return Held{}, false
	}
	return Held{ID: l.id, Token: l.token}, true
}

// lockCtx is a running handler's context: the request's, made cancellable
// with a cause, and carrying its Lock. It lives inside the Lock, so giving
// the handler its context costs no allocation beyond the cancellation.
type lockCtx struct {
	context.Context
	l *Lock
}

// Value implements context.Context.
func (c *lockCtx) Value(key any) any {
	if _, ok := key.(heldKey); ok {
		return c.l
	}
	return c.Context.Value(key)
}
