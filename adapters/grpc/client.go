package idemgrpc

import (
	"context"
	"strings"
	"time"

	"github.com/idemkit/idemkit/core/idemclient"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Defaults applied by UnaryClientInterceptor to zero ClientConfig fields:
// those of idemclient, the HTTP client.
const (
	DefaultMaxAttempts = idemclient.DefaultMaxAttempts
	DefaultBaseBackoff = idemclient.DefaultBaseBackoff
	DefaultMaxBackoff  = idemclient.DefaultMaxBackoff
)

// ClientConfig configures UnaryClientInterceptor. Every zero field takes
// the default named in its comment, so ClientConfig{} is a complete
// configuration.
type ClientConfig struct {
	// KeyName is the metadata entry carrying the key. Default KeyMetadata;
	// keep it the server's key header name in lower case.
	KeyName string
	// Methods says which calls get a key, by full method name. Default:
	// the calls the server interceptor guards by default (every method
	// except those whose proto declares idempotency_level NO_SIDE_EFFECTS
	// or IDEMPOTENT). Other calls pass through untouched, without retries.
	Methods func(fullMethod string) bool

	// MaxAttempts bounds the attempts per call, the first included.
	// Default DefaultMaxAttempts (5); 1 sends each call once, with its key
	// (for a channel whose service config has a retryPolicy: gRPC's own
	// retries send the same metadata, key included).
	MaxAttempts int
	// RetryCodes are the codes retried. Default UNAVAILABLE, ABORTED and
	// RESOURCE_EXHAUSTED. RESOURCE_EXHAUSTED is retried only when it
	// carries a RetryInfo detail (idemkit's full store does; a message over
	// a size limit, which no retry cures, does not).
	RetryCodes []codes.Code
	// BaseBackoff is the ceiling of the first backoff wait; each further
	// wait's ceiling doubles, up to MaxBackoff. Default DefaultBaseBackoff
	// (100 ms).
	BaseBackoff time.Duration
	// MaxBackoff caps the backoff ceiling, and is the longest wait accepted
	// from a RetryInfo detail: a status asking for more is returned at
	// once, for the caller to schedule the retry. Default DefaultMaxBackoff
	// (5 s).
	MaxBackoff time.Duration

	// Sleep waits d or until ctx ends, returning ctx's error in that case.
	// Default idemclient.Sleep, a timer. Tests replace it so that they
	// never wait.
	Sleep func(ctx context.Context, d time.Duration) error
	// Random returns a number in [0, 1) that scales the backoff ceiling
	// (the jitter). It must be safe for concurrent use. Default
	// math/rand/v2.Float64.
	Random func() float64
}

// UnaryClientInterceptor returns a unary client interceptor that gives
// every guarded call a key, unless its outgoing metadata already carries
// one (set with WithOutgoingKey, for a key kept with a pending operation,
// say), and retries the call with that same key. The KeyUsed call option
// tells the caller which key that was.
//
// The key is a random UUID from idemclient.NewKey, made once per call, so
// every attempt of the call carries it: this interceptor's own retries,
// and gRPC's, if the channel's service config has a retryPolicy (gRPC
// calls the interceptor once per call, and sends the same metadata with
// every attempt). A retry waits as long as the status's RetryInfo detail
// asks (idemkit's answers to a call still running, a store unavailable or
// full carry one), else an exponential backoff with full jitter, by the
// HTTP client's rule (idemclient.Backoff): a random duration below
// min(MaxBackoff, BaseBackoff·2^(n-1)) after the n-th attempt. No wait is started that would end after the call's deadline;
// the last status is then returned as it is. A call whose context ends
// before its retry starts (the caller cancelled it, or its deadline
// passed during the wait) returns the context's error as a status,
// CANCELLED or DEADLINE_EXCEEDED, since that is what became of it.
func UnaryClientInterceptor(cfg ClientConfig) grpc.UnaryClientInterceptor {
	cfg.setDefaults()
	c := &client{cfg: cfg, methods: &methods{guard: cfg.Methods}, retry: map[codes.Code]bool{}}
	for _, code := range cfg.RetryCodes {
		c.retry[code] = true
	}
	return c.intercept
}

func (c *ClientConfig) setDefaults() {
	if c.KeyName == "" {
		c.KeyName = KeyMetadata
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.RetryCodes == nil {
		c.RetryCodes = []codes.Code{codes.Unavailable, codes.Aborted, codes.ResourceExhausted}
	}
	if c.BaseBackoff <= 0 {
		c.BaseBackoff = DefaultBaseBackoff
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	c.MaxBackoff = max(c.MaxBackoff, c.BaseBackoff)
	if c.Sleep == nil {
		c.Sleep = idemclient.Sleep
	}
}

type client struct {
	cfg     ClientConfig
	methods *methods
	retry   map[codes.Code]bool
}

func (c *client) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	md, _ := metadata.FromOutgoingContext(ctx)
	key := md.Get(c.cfg.KeyName)
	if !c.methods.lookup(method).guarded {
		reportKey(opts, key)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if len(key) == 0 {
		key = []string{idemclient.NewKey()}
		ctx = metadata.AppendToOutgoingContext(ctx, c.cfg.KeyName, key[0])
	}
	reportKey(opts, key)
	for attempt := 1; ; attempt++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil || attempt >= c.cfg.MaxAttempts {
			return err
		}
		wait, ok := c.retryWait(err, attempt)
		if !ok {
			return err
		}
		if ctx.Err() != nil {
			// The caller gave up, or its deadline passed, before a retry
			// could start: that, not the last attempt's status, is what
			// became of its call.
			return status.FromContextError(ctx.Err()).Err()
		}
		if !canWait(ctx, wait) {
			return err
		}
		if serr := c.cfg.Sleep(ctx, wait); serr != nil {
			if ctx.Err() != nil {
				serr = ctx.Err()
			}
			return status.FromContextError(serr).Err()
		}
	}
}

// retryWait says whether a failed attempt deserves another, and how long
// to wait before it.
func (c *client) retryWait(err error, attempt int) (time.Duration, bool) {
	st := status.Convert(err)
	if !c.retry[st.Code()] {
		return 0, false
	}
	asked, ok := retryDelay(st)
	switch {
	case !ok && st.Code() == codes.ResourceExhausted:
		return 0, false // a limit no retry gets under
	case !ok:
		return idemclient.Backoff(attempt, c.cfg.BaseBackoff, c.cfg.MaxBackoff, c.cfg.Random), true
	case asked > c.cfg.MaxBackoff:
		return 0, false // for the caller to schedule: see MaxBackoff
	}
	return asked, true
}

// retryDelay returns the delay a status's RetryInfo detail asks for.
func retryDelay(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return max(ri.GetRetryDelay().AsDuration(), 0), true
		}
	}
	return 0, false
}

// canWait reports whether a wait of d is worth starting: if the call's
// context has a deadline, it must leave time after the wait for another
// attempt.
func canWait(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return !ok || d < time.Until(dl)
}

// WithOutgoingKey returns a copy of ctx whose outgoing metadata carries
// key as the call's idempotency key (the KeyMetadata entry), in place of
// any key it carried. key is sent as it is: a value KeyUsed reported, one
// from idemclient.NewKey, or a key of the caller's own that the server's
// key syntax accepts. A client interceptor with another ClientConfig.KeyName
// needs metadata.AppendToOutgoingContext with that name instead.
//
// Every call made with the copy carries key, and the client interceptor
// sends it instead of a key of its own: the way to retry an operation
// after its call returned (a DEADLINE_EXCEEDED, a process restart) so that
// it still runs once.
func WithOutgoingKey(ctx context.Context, key string) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx) // a copy, or nil
	if md == nil {
		md = metadata.MD{}
	}
	md.Set(KeyMetadata, key)
	return metadata.NewOutgoingContext(ctx, md)
}

// KeyUsed returns a call option that makes the client interceptor store in
// *key the idempotency key the call is sent with, before its first
// attempt: the key of the call's outgoing metadata, or the one the
// interceptor made for it, exactly as sent (a made key is a quoted
// sf-string). A call sent without a key leaves "". Without the client
// interceptor, the option does nothing.
//
// A caller that retries the call itself, after a status the interceptor
// does not retry (DEADLINE_EXCEEDED) or after the interceptor gave up,
// sends the same key again with WithOutgoingKey, so that the operation
// runs once: a retry with a new key is a new operation.
func KeyUsed(key *string) grpc.CallOption {
	return keyUsed{key: key}
}

// keyUsed is the call option of KeyUsed: gRPC itself ignores it.
type keyUsed struct {
	grpc.EmptyCallOption
	key *string
}

// reportKey stores the call's key (its metadata values, one if valid) in
// every KeyUsed option among opts.
func reportKey(opts []grpc.CallOption, key []string) {
	for _, o := range opts {
		if k, ok := o.(keyUsed); ok && k.key != nil {
			*k.key = strings.Join(key, ", ")
		}
	}
}

// Replayed reports whether a call's response header metadata (got with
// the grpc.Header call option) says its answer is a replay of an outcome
// recorded earlier.
func Replayed(header metadata.MD) bool {
	v := header.Get(ReplayedMetadata)
	return len(v) == 1 && v[0] == "true"
}
