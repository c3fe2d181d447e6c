package gormstore

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	idem "github.com/idemkit/idemkit/core"
)

// inflight holds the records in flight of one table on SQLite, for every
// Store of the process on it (see local.go). Each is the lock of a key
// whose handler runs: it follows the store contract as a row would
// (lease, takeover, expiry, fencing), but lives in memory, so that a new
// key writes nothing until it completes, and a crash frees it.
//
// The table holds completed records only. A key's in-flight record and
// its row are kept consistent by the key's shard: Acquire reads the row
// outside the shard's lock, then checks under it that no completion of
// the shard landed meanwhile (shard.landed), and creates the record only
// then; a completion writes its row while its record, marked completing,
// still holds the key, and drops the record once the row is written. So
// there is no moment at which a key has neither, and none at which a live
// row and a record both hold it.
type inflight struct {
	refs int // the stores using it; under sqliteFiles
	// freed: the records in flight that a process which died left in the
	// table have been deleted (see Store.freeLeftovers).
	freed  atomic.Bool
	shards [inflightShards]shard
}

const inflightShards = 64

type shard struct {
	mu sync.Mutex
	m  map[rowKey]*flight
	// landed counts the completions of the shard's keys that wrote, or may
	// have written, their row.
	landed uint64
}

// rowKey is a record's key columns (hashID): scope hash, then key hash.
type rowKey [64]byte

func keyOf(scope, key blob) rowKey {
	var k rowKey
	copy(k[:32], scope)
	copy(k[32:], key)
	return k
}

// flight is a record in flight. Times are Unix nanoseconds, as stored.
type flight struct {
	id                      idem.ID
	fp                      idem.Fingerprint
	token                   string
	lease, created, expires int64
	// completing: Complete is writing the completed record. The record
	// still holds the key, and nothing but that completion may change it.
	completing bool
}

func newInflight() *inflight {
	t := &inflight{}
	for i := range t.shards {
		t.shards[i].m = make(map[rowKey]*flight)
	}
	return t
}

// shard returns the shard of k, by its key hash.
func (t *inflight) shard(k *rowKey) *shard {
	return &t.shards[binary.LittleEndian.Uint32(k[32:])%inflightShards]
}

// expired is idem.Record.Expired for f.
func (f *flight) expired(now int64) bool {
	return now >= f.expires && now >= f.lease
}

// record returns f as Get returns it.
func (f *flight) record() idem.Record {
	return idem.Record{
		ID:          f.id,
		Fingerprint: f.fp,
		State:       idem.InFlight,
		Token:       f.token,
		LeaseUntil:  fromNanos(f.lease),
		ExpiresAt:   fromNanos(f.expires),
		CreatedAt:   fromNanos(f.created),
	}
}

// held returns the record in flight for k that token holds, or nil. The
// caller holds the shard's lock.
func (sh *shard) held(k rowKey, token string) *flight {
	if f := sh.m[k]; f != nil && f.token == token {
		return f
	}
	return nil
}

// count returns the number of records in flight.
func (t *inflight) count() int {
	n := 0
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// purge deletes at most limit records expired at now, none of them
// completing, and returns how many it deleted.
func (t *inflight) purge(now int64, limit int) int {
	n := 0
	for i := 0; i < len(t.shards) && n < limit; i++ {
		sh := &t.shards[i]
		sh.mu.Lock()
		for k, f := range sh.m {
			if n == limit {
				break
			}
			if !f.completing && f.expired(now) {
				delete(sh.m, k)
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}
