package idem

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
)

// DefaultHeaderName is the request header that carries the key, unless
// Config.HeaderName names another.
const DefaultHeaderName = "Idempotency-Key"

// Defaults applied by New to zero Config fields: the published policy.
// Engine.Config returns a Config with them filled in.
const (
	defaultTTL             = 24 * time.Hour
	defaultLease           = 30 * time.Second
	defaultRetryAfter      = time.Second
	defaultStoreTimeout    = 5 * time.Second
	defaultMaxRequestBody  = 1 << 20
	defaultMaxResponseBody = 1 << 20
	defaultProblemBase     = "https://github.com/idemkit/idemkit/blob/main/docs/problems.md#"
)

// The accepted ranges of Config.TTL and Config.Lease: a TTL up to
// MaxDuration, a lease from MinLease to MaxDuration; New panics, naming the
// field, outside them. A lease shorter than MinLease cannot be kept by the
// renewer (each renewal pass comes at least a millisecond after the last,
// and a handler is told to stop two passes before its lease ends), and a
// time further off than MaxDuration would not fit the stores' clocks: the
// GORM store keeps nanoseconds since 1970 in 64 bits (which end in 2262),
// and Redis counts its expiries in milliseconds.
const (
	MinLease    = 100 * time.Millisecond
	MaxDuration = 100 * 365 * 24 * time.Hour
)

// Config configures an Engine. Every zero field takes the default named in
// its comment, so Config{Store: s} is a complete, safe configuration.
type Config struct {
	// Store keeps the records. Required: New panics without one.
	Store Store

	// HeaderName is the request header carrying the key. Default "Idempotency-Key".
	HeaderName string
	// Methods are the guarded methods; requests with other methods pass through
	// untouched. Default POST and PATCH.
	Methods []string
	// KeyOptional lets guarded requests without a key through, processed
	// normally and not recorded (for gradual adoption). Default: key required.
	KeyOptional bool
	// StrictKeys accepts only RFC 9651 sf-strings. Default: lenient, which also
	// accepts bare keys such as an unquoted UUID (see ParseKey).
	StrictKeys bool
	// ValidateKey, if set, checks each key that parsed (a team that
	// requires UUID keys, say). A key it refuses is answered 400
	// key-invalid, with the error's text in the problem's detail (after
	// "idempotency key invalid: "): write it for the client, and never
	// quote the key. It is not called for jobs
	// (Engine.Do), whose keys the program chooses. Default: any key the
	// policy accepts.
	ValidateKey func(key string) error

	// TTL is how long a completed record is replayed. Default 24 h; at most
	// MaxDuration (100 years).
	TTL time.Duration
	// Lease is how long an in-flight holder keeps the key without renewing;
	// a crashed holder's key is free again after at most one lease. Default
	// 30 s; at least MinLease (100 ms), at most MaxDuration (100 years).
	Lease time.Duration
	// RenewEvery is how often a running handler's lease is renewed. Default
	// Lease/3; a value above Lease/2 leaves too little time for a failed
	// renewal to be tried again, and is replaced by the default. See
	// docs/concepts.md for the sizing rule between Lease, RenewEvery and
	// the store's latency.
	RenewEvery time.Duration
	// StoreTimeout is the deadline of every store call: Acquire (also
	// bounded by the request's own context), Complete and Release (which
	// run even if the client has gone), and each renewal (also bounded by
	// RenewEvery/2). A store that does not answer in time counts as
	// unavailable: the request gets 503, or its outcome is left to the
	// lease. Default 5 s.
	StoreTimeout time.Duration
	// HandlerTimeout, if set, cancels the handler's context with cause
	// ErrHandlerTimeout once it has run this long. Unlike a timeout
	// middleware registered inside idemkit (http.TimeoutHandler, Echo's
	// Timeout), it keeps the key locked until the handler has really
	// returned, so a retry can never run beside it. Default: none.
	HandlerTimeout time.Duration
	// RetryAfter is sent, rounded up to whole seconds, with the 409, 429
	// and 503 answers that ask the client to retry. Default 1 s.
	RetryAfter time.Duration

	// MaxRequestBody is the largest request body accepted on guarded requests;
	// larger ones get 413 before being read whole. Default 1 MiB.
	MaxRequestBody int64
	// MaxResponseBody is the largest response body stored; larger responses
	// are sent but not stored, and the key is released. Default 1 MiB.
	MaxResponseBody int

	// ReplayHeaders are response headers replayed besides Content-Type and
	// Location. Set-Cookie, Authorization and hop-by-hop headers are never
	// stored, even if listed.
	ReplayHeaders []string

	// Fingerprint replaces the request fingerprint (default: SHA-256 over
	// method, path and payload, with JSON payloads canonicalised).
	// It gets the request by value, with Body already read.
	Fingerprint func(exchange.Request) Fingerprint

	// ProblemBase prefixes the problem type names (key-missing, key-invalid,
	// key-reused, request-in-progress, payload-too-large, store-unavailable,
	// store-full, body-unreadable) to form their type URIs. Default defaultProblemBase.
	ProblemBase string

	// FailOpen runs handlers unprotected when the store cannot be reached.
	// UNSAFE: retries during an outage may execute twice. Default: fail closed
	// with 503.
	FailOpen bool

	// Clock is the source of time for records, leases, renewals, timeouts
	// and store deadlines. Default the system clock; tests give a clock they
	// move by hand (idemtest.Clock).
	Clock Clock
	// KeyHashSecret keys the hash of a key that logs and traces carry
	// (idemevent.Event.KeyHash), so that nobody who reads them can test a guessed key
	// (order-48213) against it. Give a fleet's instances the same secret,
	// so that their lines about one key correlate. Default: random bytes,
	// new in each process.
	KeyHashSecret []byte
	// Logger receives one line per event: decisions at DEBUG, trouble at
	// WARN or ERROR (store errors at ERROR), repeated warnings at most once a
	// minute (see docs/operations.md, Logging). Default slog.Default().
	Logger *slog.Logger
	// OnEvent, if set, is called synchronously for every event: each
	// guarded request's decision, what became of a handler that ran, and
	// its lease's troubles (see idemevent.Event). It must be fast and must not retain
	// the idemevent.Event.
	OnEvent func(context.Context, idemevent.Event)
}

// neverReplayed are response headers that must not be stored: credentials
// and connection-specific fields belong to one exchange only.
var neverReplayed = map[string]bool{
	"Set-Cookie": true, "Authorization": true, "Proxy-Authenticate": true,
	"Connection": true, "Keep-Alive": true, "Transfer-Encoding": true, "Te": true,
	"Trailer": true, "Upgrade": true, "Proxy-Connection": true, "Content-Length": true,
	exchange.ReplayedHeader: true,
}

func (c *Config) setDefaults() {
	if c.Store == nil {
		panic("idem: Config.Store is nil")
	}
	if c.HeaderName == "" {
		c.HeaderName = DefaultHeaderName
	}
	c.HeaderName = http.CanonicalHeaderKey(c.HeaderName)
	if c.Methods == nil {
		c.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if c.TTL <= 0 {
		c.TTL = defaultTTL
	}
	if c.Lease <= 0 {
		c.Lease = defaultLease
	}
	if c.TTL > MaxDuration {
		panic(fmt.Sprintf("idem: Config.TTL is %v, above MaxDuration (%v): expiry times that far off do not fit the stores' clocks", c.TTL, MaxDuration))
	}
	if c.Lease < MinLease || c.Lease > MaxDuration {
		panic(fmt.Sprintf("idem: Config.Lease is %v, outside [MinLease, MaxDuration] = [%v, %v]: "+
			"a shorter lease cannot be renewed in time, a longer one does not fit the stores' clocks", c.Lease, MinLease, MaxDuration))
	}
	if c.RenewEvery <= 0 || c.RenewEvery > c.Lease/2 {
		c.RenewEvery = c.Lease / 3
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = defaultStoreTimeout
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = defaultRetryAfter
	}
	if c.MaxRequestBody <= 0 {
		c.MaxRequestBody = defaultMaxRequestBody
	}
	if c.MaxResponseBody <= 0 {
		c.MaxResponseBody = defaultMaxResponseBody
	}
	if c.Fingerprint == nil {
		c.Fingerprint = DefaultFingerprint
	}
	if c.ProblemBase == "" {
		c.ProblemBase = defaultProblemBase
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// replayHeaderSet returns the canonical names of the headers to store.
func (c *Config) replayHeaderSet() []string {
	names := []string{"Content-Type", "Location"}
	for _, h := range c.ReplayHeaders {
		h = http.CanonicalHeaderKey(strings.TrimSpace(h))
		if h != "" && !neverReplayed[h] && !slices.Contains(names, h) {
			names = append(names, h)
		}
	}
	return names
}
