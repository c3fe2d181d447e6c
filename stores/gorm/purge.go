package gormstore

import (
	"context"
	"log/slog"
	"time"
)

// Pacing of the background purger. A purge batch is one DELETE; on SQLite it
// holds the database's single write lock while it runs, and the process's
// writes wait for their turn behind it (see Store.write). Batches run back
// to back once starved writers for as long as the backlog lasted (136 ms
// p99, 950 ms at worst, while 160,000 rows went at 500 new keys a second).
// So the purger sizes its batches by time and leaves the database alone
// between them:
const (
	// purgeHold is how long one batch should take on SQLite: a request's
	// completion that comes while it runs waits about that long for its
	// turn, as long as the rest of its work takes. The batch size follows
	// the rows per purgeHold the last batch deleted, between 1 and
	// WithPurgeBatch. With 1 ms, the p99 of new keys while a million rows
	// went was 1.6 to 2.1 times that with nothing to purge; with 0.5 ms,
	// 1.5 times.
	purgeHold = 500 * time.Microsecond
	// purgeYield is how many times a batch's duration the purger then
	// waits, on every dialect, so that it takes at most a fifth of the time
	// (of the write lock, on SQLite) however large the backlog.
	purgeYield = 4
	// minPurgePause is the shortest wait between two batches.
	minPurgePause = time.Millisecond
	// firstSQLiteBatch is the size of the first batch of a purge on SQLite,
	// before any has been timed.
	firstSQLiteBatch = 16
	// checkpointRows is how many rows the purger deletes on SQLite between
	// two checkpoints of the write-ahead log (see Store.checkpoint): about
	// 150 pages. A checkpoint copies the pages, then syncs the file, which
	// takes longer the more was written since the last sync, and the
	// requests of a process that has one core to run on wait meanwhile:
	// every 256 rows the p99 of new keys during a purge was 2.1 times that
	// without, every 128 rows 1.6 times (every 64, no better, and slower).
	checkpointRows = 128
)

// purgeLoop purges every purge interval until Close cancels ctx.
func (s *Store) purgeLoop(ctx context.Context) {
	defer close(s.purgeDone)
	s.purge.Run(ctx, s.purgeExpired)
}

// purgeExpired runs batches until one deletes fewer rows than it was
// allowed, pausing after each one (see purgeYield).
func (s *Store) purgeExpired(ctx context.Context) {
	batch := s.purge.Batch
	p := pacer{limit: batch, size: batch}
	if s.dialect == dialectSQLite {
		p.hold = purgeHold
		p.size = min(batch, firstSQLiteBatch)
	}
	unsynced := 0 // rows deleted since the last checkpoint
	for {
		size := p.size
		start := s.meter()
		n, err := s.Purge(ctx, s.purge.Now(s.base), size)
		if unsynced += n; err == nil && s.dialect == dialectSQLite &&
			(unsynced >= checkpointRows || n < size && unsynced > 0) {
			err, unsynced = s.checkpoint(ctx), 0
		}
		took := s.meter().Sub(start)
		if err != nil {
			if ctx.Err() == nil {
				s.logger.LogAttrs(ctx, slog.LevelWarn, "idempotency records purge failed",
					slog.String("table", s.table), slog.String("error", err.Error()))
			}
			return
		}
		if n < size {
			return
		}
		if !s.pause(ctx, p.after(n, took)) {
			return
		}
	}
}

// checkpoint copies the pages the purge wrote to SQLite's write-ahead log
// into the database file, without waiting for anyone (PASSIVE). Deleting
// rows keyed by random hashes writes a page per row or so; left to a
// checkpoint every 1000 pages, as SQLite does in the commit that takes the
// log past them, or to the writer's checkpointer, each checkpoint copied
// and synced long enough to hold requests up (a p99 of 10.5 ms during a
// purge against 4.3 ms with no checkpoint at all). Checkpointed every
// checkpointRows rows, the log stays short, and the purger, whose pause
// follows the time spent here, does that work itself.
func (s *Store) checkpoint(ctx context.Context) error {
	return s.run(ctx, func(x session) error {
		_, err := x.exec("PRAGMA wal_checkpoint(PASSIVE)")
		return err
	})
}

// pacer sizes the purger's batches and the pauses between them.
type pacer struct {
	limit int           // the most rows a batch may delete (WithPurgeBatch)
	size  int           // the next batch's size
	hold  time.Duration // the time a batch should take; 0: size stays limit
}

// after takes note of a batch that deleted n rows in took, sets the next
// batch's size, and returns how long to wait before it.
func (p *pacer) after(n int, took time.Duration) time.Duration {
	if p.hold > 0 {
		next := p.limit
		if took > 0 {
			next = int(int64(n) * int64(p.hold) / int64(took))
		}
		// Grow at most twofold a batch: one fast batch (the rows' pages
		// still cached) says little about the next.
		p.size = max(1, min(next, 2*p.size, p.limit))
	}
	return max(purgeYield*took, minPurgePause)
}

// sleepCtx waits d, or until ctx ends, and reports whether it waited d.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
