package idem

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// heldKey is the context key under which a running handler's Lock is found.
type heldKey struct{}

// HeldKey returns the key the request whose context is ctx holds, with its
// owner token, while that request's handler runs. The token is a fencing
// token: it changes with every holder of the key, so a handler may pass it
// (or the scoped key) downstream, to a payment provider's own idempotency
// key or a conditional write, and the receiver can tell a stale holder from
// the current one. It reports false outside a guarded handler. Within a
// job's function (Engine.Do), the ID is the job's scope and key as given,
// not the JobID its record is stored under.
func HeldKey(ctx context.Context) (Held, bool) {
	l, ok := ctx.Value(heldKey{}).(*lock)
	if !ok {
		return Held{}, false
	}
	id := l.id
	if l.method == jobMethod {
		id.Key = id.Key[len(jobKeyPrefix):]
	}
	return Held{ID: id, Token: l.token}, true
}

// lockCtx is a running handler's context: the request's, made cancellable
// with a cause, and carrying its Lock. It lives inside the Lock, and the
// cancellable context behind it is made only when something asks whether
// it is done (Done, Err, or context.Cause and the context package, which
// look it up through Value): a handler that never does costs no context
// allocation, and nothing is registered with the request's context. Until
// then a cancellation is kept as pending and applied when the context is
// made, so every observer sees the same outcome as with an eager one.
type lockCtx struct {
	parent context.Context
	l      *lock

	made    atomic.Bool // inner and cancel are set, and never change again
	stopped atomic.Bool // pending is set

	mu      sync.Mutex // guards making inner, and pending before that
	inner   context.Context
	cancel  context.CancelCauseFunc
	pending error // the first cancellation asked for before inner was made
}

// get returns the cancellable context, making it on first use.
func (c *lockCtx) get() context.Context {
	if c.made.Load() {
		return c.inner
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.made.Load() {
		c.inner, c.cancel = context.WithCancelCause(c.parent)
		if c.pending != nil {
			c.cancel(c.pending)
		}
		c.made.Store(true)
	}
	return c.inner
}

// stop cancels the context with cause, now if it has been made, or when it
// is. The first cause wins, as with context.CancelCauseFunc.
func (c *lockCtx) stop(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.made.Load() {
		c.cancel(cause)
		return
	}
	if c.pending == nil {
		c.pending = cause
		c.stopped.Store(true)
	}
}

// Deadline implements context.Context: the request's, since the Lock adds
// none (Config.HandlerTimeout cancels, with a cause of its own).
func (c *lockCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Done implements context.Context.
func (c *lockCtx) Done() <-chan struct{} { return c.get().Done() }

// Err implements context.Context.
func (c *lockCtx) Err() error {
	if !c.made.Load() && !c.stopped.Load() {
		return c.parent.Err() // not cancelled by the Lock: the request's verdict
	}
	return c.get().Err()
}

// Value implements context.Context. Keys other than the Lock's go to the
// request's context while nothing has cancelled this one, which gives the
// same answers, context.Cause's lookup included; afterwards, to the
// cancellable context that carries the cause.
func (c *lockCtx) Value(key any) any {
	if _, ok := key.(heldKey); ok {
		return c.l
	}
	if !c.made.Load() && !c.stopped.Load() {
		return c.parent.Value(key)
	}
	return c.get().Value(key)
}

// String describes the context, like the context package's own.
func (c *lockCtx) String() string { return "idem.Lock.Context" }
