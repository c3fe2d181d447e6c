package idemclient

import (
	"context"
	"math/rand/v2"
	"net/http"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultMaxAttempts = 5
	DefaultBaseBackoff = 100 * time.Millisecond
	DefaultMaxBackoff  = 5 * time.Second
	DefaultBudget      = 30 * time.Second
)

// Config configures a Transport. Every zero field takes the default named in
// its comment, so Config{} is a complete configuration.
type Config struct {
	// Base sends each attempt. Default http.DefaultTransport.
	Base http.RoundTripper

	// HeaderName is the header carrying the key. Default "Idempotency-Key".
	HeaderName string
	// KeyMethods are the methods that get a key and are retried on 409 too.
	// Keep them in step with the server's idem.Config.Methods. Default POST
	// and PATCH.
	KeyMethods []string

	// MaxAttempts bounds the attempts per request, the first included.
	// Default 5; 1 sends every request once (keys are still added).
	MaxAttempts int
	// BaseBackoff is the ceiling of the first backoff wait; each further
	// wait's ceiling doubles, up to MaxBackoff. Default 100 ms.
	BaseBackoff time.Duration
	// MaxBackoff caps the backoff ceiling, and is the longest wait the
	// Transport accepts from a server's Retry-After, whatever the Budget: a
	// server asking for a longer pause gets its answer handed back at once
	// (Retry-After included) for the caller to schedule the retry. The
	// Transport never retries sooner than a server asked. Default 5 s.
	MaxBackoff time.Duration
	// Budget bounds the time spent retrying: no wait is started that would
	// end, and so no attempt starts, later than Budget after the first
	// attempt began. It does not cut a running attempt short; the request's
	// context and AttemptTimeout do. The body of an answer that is retried
	// is read (to keep its connection) only within the time the budget
	// leaves before the wait, and for a second at most; a body slower than
	// that is closed unread, with its connection. Default 30 s; negative:
	// no budget (waits are still bounded by MaxBackoff and the context's
	// deadline).
	Budget time.Duration
	// AttemptTimeout, if positive, bounds each attempt, reading its response
	// body included (as http.Client.Timeout does for a whole request). An
	// attempt that times out is retried. Default: no per-attempt timeout.
	AttemptTimeout time.Duration

	// Now is the clock measuring the budget and reading Retry-After dates.
	// Default time.Now. The context's deadline is always compared with the
	// real clock, as the context's own timer is.
	Now func() time.Time
	// Sleep waits d or until ctx ends, returning ctx's error in that case.
	// Default: a timer. Tests replace Now and Sleep so that they never wait.
	Sleep func(ctx context.Context, d time.Duration) error
	// Random returns a number in [0, 1) that scales the backoff ceiling (the
	// jitter). It must be safe for concurrent use. Default math/rand/v2.Float64.
	Random func() float64
}

func (c *Config) setDefaults() {
	if c.Base == nil {
		c.Base = http.DefaultTransport
	}
	if c.HeaderName == "" {
		c.HeaderName = idem.DefaultHeaderName
	}
	c.HeaderName = http.CanonicalHeaderKey(c.HeaderName)
	if c.KeyMethods == nil {
		c.KeyMethods = []string{http.MethodPost, http.MethodPatch}
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BaseBackoff <= 0 {
		c.BaseBackoff = DefaultBaseBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.MaxBackoff < c.BaseBackoff {
		c.MaxBackoff = c.BaseBackoff
	}
	if c.Budget == 0 {
		c.Budget = DefaultBudget
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = Sleep
	}
	if c.Random == nil {
		c.Random = rand.Float64
	}
}

// Sleep waits d on a timer, or less if ctx ends first, and then returns
// ctx's error: nil after a full wait. It is the default of Config.Sleep,
// and of the gRPC interceptor's.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
