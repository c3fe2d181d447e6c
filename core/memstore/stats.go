package memstore

import (
	"sync/atomic"
	"time"
)

// Stats is what a Store holds against its bound, and what its purges have
// done: for metrics and health checks.
type Stats struct {
	// Records is the number of records held, expired ones included until
	// they are swept: what counts against MaxRecords (Len).
	Records int
	// MaxRecords is the bound of WithMaxRecords: a new key that finds the
	// store at it, once expired records are swept, fails with
	// idem.ErrStoreFull.
	MaxRecords int
	// PurgeBatches is the number of Purge calls since New: the background
	// purger's batches and explicit calls.
	PurgeBatches int64
	// Purged is the number of expired records those calls deleted. The
	// sweeps a full store makes for a new key are not counted.
	Purged int64
	// PurgeTime is the time those calls took, in all.
	PurgeTime time.Duration
}

// Stats returns the Store's counts. It takes no lock: a few atomic loads,
// cheap enough for every scrape of a metrics endpoint. The fields are read
// one after the other, so while requests run they may be a moment apart.
func (s *Store) Stats() Stats {
	return Stats{
		Records:      s.Len(),
		MaxRecords:   int(s.maxRecords),
		PurgeBatches: s.purges.batches.Load(),
		Purged:       s.purges.deleted.Load(),
		PurgeTime:    time.Duration(s.purges.nanos.Load()),
	}
}

// purgeCounts adds up what Purge calls did, for Stats.
type purgeCounts struct {
	batches, deleted, nanos atomic.Int64
}

func (c *purgeCounts) add(deleted int, took time.Duration) {
	c.batches.Add(1)
	c.deleted.Add(int64(deleted))
	c.nanos.Add(int64(took))
}
