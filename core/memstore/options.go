package memstore

import "time"

// Defaults of the options.
const (
	// DefaultMaxRecords bounds memory: past it, Acquire of a new key fails
	// with idem.ErrStoreFull (the Engine answers 503) rather than evicting a
	// record that a retry may still need.
	DefaultMaxRecords    = 100_000
	DefaultPurgeInterval = time.Minute
	DefaultPurgeBatch    = 1000
)

// Option configures a Store.
type Option func(*options)

type options struct {
	maxRecords    int
	purgeInterval time.Duration
	purgeBatch    int
	now           func() time.Time
}

// WithMaxRecords bounds the number of records held (default DefaultMaxRecords).
// The bound is enforced per shard, so the store may refuse a new key slightly
// before the total is reached.
func WithMaxRecords(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxRecords = n
		}
	}
}

// WithPurgeInterval sets how often the background purger runs (default one
// minute); 0 disables it, leaving purging to explicit Purge calls.
func WithPurgeInterval(d time.Duration) Option {
	return func(o *options) { o.purgeInterval = max(d, 0) }
}

// WithPurgeBatch sets how many records one purge batch deletes (default 1000).
func WithPurgeBatch(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.purgeBatch = n
		}
	}
}

// WithClock sets the clock the background purger uses to decide what has
// expired (default time.Now). Give it the Engine's clock.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}
