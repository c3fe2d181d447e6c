package memstore

import (
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/internal/purge"
)

// Defaults of the options.
const (
	// DefaultMaxRecords bounds memory: with it reached, Acquire of a new key
	// fails with idem.ErrStoreFull (the Engine answers 429 store-full with
	// Retry-After) rather than evict a record that a retry may still need.
	// A million records hold the default 24 h TTL at 11.5 new keys a
	// second (a million a day), and take about 290 MB with 150-byte
	// responses (see the package doc).
	DefaultMaxRecords    = 1_000_000
	DefaultPurgeInterval = time.Minute
	DefaultPurgeBatch    = 1000
)

// defaultScopeShare: unless WithMaxRecordsPerScope says otherwise, a scope
// may hold one tenth of the store's records.
const defaultScopeShare = 10

// Option configures a Store.
type Option func(*options)

type options struct {
	maxRecords  int
	maxPerScope int
	purge       purge.Options
}

// WithMaxRecords bounds the number of records the whole store holds
// (default DefaultMaxRecords), counting expired records until they are
// swept. A new key that finds the store full first has the expired records
// swept to make room, and fails with idem.ErrStoreFull if none were: a live
// record is never evicted, since a retry may still need it. Size it as the
// peak rate of new keys times the Engine's TTL: the default holds a 24 h TTL
// at 11.5 new keys a second. n <= 0 leaves the default.
func WithMaxRecords(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxRecords = n
		}
	}
}

// WithMaxRecordsPerScope bounds the records one scope (tenant, idem.ID.Scope)
// may hold, so that one tenant filling its share never locks the others out:
// a new key of a scope at its quota fails with idem.ErrStoreFull while other
// scopes still get theirs. The default is a tenth of WithMaxRecords (at
// least 1): it takes ten tenants at their quota to fill the store, and one
// tenant's burst, or one attacker's account, leaves nine tenths of it to the
// others. Give it the peak rate of new keys of your busiest tenant times the
// TTL; n >= WithMaxRecords turns the quota off; n <= 0 leaves the default.
//
// The quota binds every non-empty scope, and the empty scope "" only while
// some non-empty scope holds records. An application without tenants (every
// key in "") thus has the whole store, and one with tenants cannot be filled
// through "" by callers its scope function leaves without one.
func WithMaxRecordsPerScope(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxPerScope = n
		}
	}
}

// WithPurgeInterval sets how often the background purger runs (default
// DefaultPurgeInterval); 0 disables it, leaving purging to explicit Purge
// calls and to the sweeps a full store makes.
func WithPurgeInterval(d time.Duration) Option { return func(o *options) { o.purge.SetInterval(d) } }

// WithPurgeBatch sets the most records one purge batch deletes (default
// DefaultPurgeBatch).
func WithPurgeBatch(n int) Option { return func(o *options) { o.purge.SetBatch(n) } }

// WithClock sets the clock by which the background purger decides what has
// expired and when it runs: its passes come as the clock's timers fire
// (idem.Clock.AfterFunc), so a clock moved by hand (idemtest.Clock) moves
// the purger too. Default the system clock. Give it the Engine's Clock.
func WithClock(c idem.Clock) Option { return func(o *options) { o.purge.SetClock(c) } }
