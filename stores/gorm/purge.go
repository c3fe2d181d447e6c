package gormstore

import (
	"context"
	"log/slog"
	"time"
)

// purgeLoop deletes expired records every interval, batch by batch, until
// ctx is cancelled by Close. Each batch is its own short statement, so
// requests are never held up for a whole sweep.
func (s *Store) purgeLoop(ctx context.Context, every time.Duration) {
	defer close(s.purgeDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.purgeExpired(ctx)
		}
	}
}

// purgeExpired runs batches until one deletes fewer than a full batch.
func (s *Store) purgeExpired(ctx context.Context) {
	for {
		n, err := s.Purge(ctx, s.now(), s.batch)
		if err != nil {
			if ctx.Err() == nil {
				s.logger.LogAttrs(ctx, slog.LevelWarn, "idempotency records purge failed",
					slog.String("table", s.table), slog.String("error", err.Error()))
			}
			return
		}
		if n < s.batch {
			return
		}
	}
}
