package gormstore

import (
	"log/slog"
	"time"
)

// Defaults of the options.
const (
	// DefaultTable is the name of the table holding the records.
	DefaultTable = "idem_records"
	// DefaultPurgeInterval is how often the background purger deletes
	// expired records.
	DefaultPurgeInterval = time.Minute
	// DefaultPurgeBatch is how many records one purge statement deletes at
	// most: small enough that no delete holds its locks for long. On SQLite
	// the background purger sizes its batches by time, below this bound
	// (see the package doc).
	DefaultPurgeBatch = 1000
)

// Option configures a Store.
type Option func(*options)

type options struct {
	table         string
	purgeInterval time.Duration
	purgeBatch    int
	now           func() time.Time
	logger        *slog.Logger
	closeTimeout  time.Duration
}

// WithTable sets the table name (default DefaultTable). It may be qualified
// with a schema, "schema.table"; each part is letters, digits and
// underscores, at most 48 bytes, so that derived index names stay within
// every dialect's limit.
func WithTable(name string) Option {
	return func(o *options) { o.table = name }
}

// WithPurgeInterval sets how often the background purger runs (default
// DefaultPurgeInterval); 0 disables it, leaving purging to explicit Purge
// calls (from a cron job, say).
func WithPurgeInterval(d time.Duration) Option {
	return func(o *options) { o.purgeInterval = max(d, 0) }
}

// WithPurgeBatch sets how many records one statement of the background
// purger deletes at most (default DefaultPurgeBatch). On SQLite the purger
// keeps each batch to about a millisecond, so batches are often smaller.
func WithPurgeBatch(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.purgeBatch = n
		}
	}
}

// WithClock sets the clock the background purger uses to decide what has
// expired (default time.Now). Give it the Engine's clock. The store's other
// methods take every time from the Engine.
func WithClock(now func() time.Time) Option {
	return func(o *options) {
		if now != nil {
			o.now = now
		}
	}
}

// WithLogger sets where the background purger reports failed purges
// (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) {
		if l != nil {
			o.logger = l
		}
	}
}

// WithCloseTimeout sets how long Close waits for the calls under way when
// it begins (default DefaultCloseTimeout). Each of them ends by its
// context's deadline, except Acquire's writes left running after their
// caller gave up, which end within a lease: a timeout shorter than the
// Engine's Lease may leave such a write running after Close returned.
func WithCloseTimeout(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.closeTimeout = d
		}
	}
}
