package gormstore

import (
	"log/slog"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/internal/purge"
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
	table        string
	purge        purge.Options
	logger       *slog.Logger
	closeTimeout time.Duration
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
func WithPurgeInterval(d time.Duration) Option { return func(o *options) { o.purge.SetInterval(d) } }

// WithPurgeBatch sets the most records one statement of the background
// purger deletes (default DefaultPurgeBatch). On SQLite the purger keeps
// each batch to about a millisecond, so batches are often smaller.
func WithPurgeBatch(n int) Option { return func(o *options) { o.purge.SetBatch(n) } }

// WithClock sets the clock by which the background purger decides what has
// expired and when it runs: its passes come as the clock's timers fire
// (idem.Clock.AfterFunc). Default the system clock. Give it the Engine's
// Clock. The store's other methods take every time from the Engine.
func WithClock(c idem.Clock) Option { return func(o *options) { o.purge.SetClock(c) } }

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
