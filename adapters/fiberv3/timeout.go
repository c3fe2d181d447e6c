package idemfiber

import (
	"context"

	idem "github.com/idemkit/idemkit/core"
)

// leftRunning ends lock for a handler that a timeout registered inside
// idemkit gave up on and left running on a goroutine of its own, having
// marked the request's fiber.Ctx abandoned. Fiber v3's timeout middleware
// does that, and it wraps a route's handler, so it is always inside
// idemkit when idemkit is registered with app.Use or on a group.
//
// A request found abandoned when the chain below idemkit returns was
// given up on by a timeout inside idemkit only if the context idemkit
// received is still live: a timeout registered before idemkit (as
// middleware calling c.Next) gives up when the context it gave idemkit
// ends, and then runs idemkit and the handler on its own goroutine, so
// when that chain returns, the handler has ended, and what it answered is
// recorded as usual: a retry gets it.
//
// Releasing the key now would let a retry run beside the handler, and
// nothing tells when that handler ends. So the key stays locked, and its
// lease renewed, for one more lease, as the net/http adapters leave such a
// key (idem.Lock.FinishHTTP): retries meanwhile get 409. Then it is
// released, and a handler still running from then on may run beside a
// retry. The timeout's own context, which the handler runs with, is
// already cancelled. An error is logged: register the timeout before
// idemkit, or use idem.Config.HandlerTimeout.
func leftRunning(ctx context.Context, e *idem.Engine, lock *idem.Lock) {
	cfg := e.Config()
	cfg.Logger.ErrorContext(ctx, "idemkit: a timeout registered inside idemkit's middleware (Fiber's timeout.New) "+
		"answered while the handler may still run: the key stays locked for one lease, but a handler that runs on "+
		"past it may run beside a retry; register the timeout before idemkit's middleware, or use Config.HandlerTimeout",
		"lease", cfg.Lease.String())
	detached := context.WithoutCancel(ctx)
	cfg.Clock.AfterFunc(cfg.Lease, func() { _ = lock.Abandon(detached, idem.ReasonTimeoutInside) })
}
