package gormstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemadmin"
	"github.com/idemkit/idemkit/internal/purge"
	"gorm.io/gorm"
)

// What an operator does with the store's records (package idemadmin): a
// record is found by its scope and key, hashed as the store hashes them,
// where SQL alone finds nothing (the table holds only the hashes).

var (
	_ idemadmin.Store   = (*Store)(nil)
	_ idemadmin.Locator = (*Store)(nil)
	_ idemadmin.Locator = (*Reader)(nil)
)

// Inspect implements idemadmin.Store: Get, described. On SQLite a record in
// flight is found in this process's memory.
func (s *Store) Inspect(ctx context.Context, id idem.ID) (idemadmin.Info, error) {
	rec, err := s.Get(ctx, id)
	if err != nil {
		return idemadmin.Info{}, err
	}
	return idemadmin.NewInfo(rec, s.Locate(id)), nil
}

// Locate implements idemadmin.Locator: the table, and the row's key
// columns.
func (s *Store) Locate(id idem.ID) string {
	scope, key := hashID(id)
	return fmt.Sprintf("table %s, %s %s, %s %s", s.table, colScope, hex.EncodeToString(scope), colKey, hex.EncodeToString(key))
}

// Forget implements idemadmin.Store. The delete is one statement whose
// WHERE clause names the state and owner token read; on SQLite a record in
// flight is dropped from memory, where it lives, under its shard's lock,
// unless its completion is being written.
func (s *Store) Forget(ctx context.Context, id idem.ID, force bool) error {
	if err := s.calls.begin(); err != nil {
		return err
	}
	defer s.calls.end()
	if err := ctx.Err(); err != nil {
		return err
	}
	scope, key := hashID(id)
	if s.local != nil {
		k := keyOf(scope, key)
		sh := s.local.table.shard(&k)
		sh.mu.Lock()
		if f := sh.m[k]; f != nil {
			defer sh.mu.Unlock()
			switch {
			case !force:
				return idemadmin.ErrInFlight
			case f.completing:
				return idemadmin.ErrChanged
			}
			delete(sh.m, k)
			return nil
		}
		sh.mu.Unlock()
	}
	rec, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	if rec.State == idem.InFlight && !force {
		return idemadmin.ErrInFlight
	}
	stmt := nativePlaceholders(s.dialect, s.adminSQL().forget)
	args := []any{scope, key, rec.Token, int(rec.State)}
	var n int64
	do := func(x session) (err error) {
		n, err = x.exec(stmt, args...)
		return err
	}
	if s.local != nil {
		err = s.write(ctx, do)
	} else {
		err = s.run(ctx, do)
	}
	switch {
	case err != nil:
		return fmt.Errorf("gormstore: forget: %w", err)
	case n == 0:
		return idemadmin.ErrChanged
	}
	return nil
}

// RecordStats implements idemadmin.Store with three aggregate reads of the
// whole table; on SQLite the records in flight of this process's memory
// are counted too.
func (s *Store) RecordStats(ctx context.Context, now time.Time, topScopes int) (idemadmin.Stats, error) {
	if err := s.calls.begin(); err != nil {
		return idemadmin.Stats{}, err
	}
	defer s.calls.end()
	st, counts, err := s.tableStats(ctx, now, topScopes)
	if err != nil {
		return idemadmin.Stats{}, err
	}
	if s.local != nil {
		s.local.table.stats(&st, counts, nanos(now))
	}
	st.TopScopes = idemadmin.TopScopes(counts, topScopes)
	return st, nil
}

// tableStats counts the table's rows; counts gets the topScopes scopes with
// the most rows.
func (s *Store) tableStats(ctx context.Context, now time.Time, topScopes int) (idemadmin.Stats, map[string]int64, error) {
	var st idemadmin.Stats
	counts := map[string]int64{}
	q := s.adminSQL()
	n := nanos(now)
	do := func(x session) error {
		rows, err := x.query(nativePlaceholders(s.dialect, q.byState))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var state, count int64
			var created, lease sql.NullInt64
			if err := rows.Scan(&state, &count, &created, &lease); err != nil {
				return err
			}
			switch idem.State(state) {
			case idem.Completed:
				st.Completed += count
			case idem.InFlight:
				st.InFlight += count
				st.OldestInFlight = fromNanos(created.Int64)
				st.OldestLeaseEnd = fromNanos(lease.Int64)
			}
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := x.row(nativePlaceholders(s.dialect, q.expired), n, n).Scan(&st.Expired); err != nil {
			return err
		}
		rows, err = x.query(nativePlaceholders(s.dialect, q.topScopes), max(topScopes, 0))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var scope []byte
			var count int64
			if err := rows.Scan(&scope, &count); err != nil {
				return err
			}
			counts[hex.EncodeToString(scope)] = count
		}
		return rows.Err()
	}
	// On a connection of the pool, even on SQLite: the store's own reader
	// serves single rows, and a read never waits for the write lock.
	if err := s.run(ctx, do); err != nil {
		return st, nil, fmt.Errorf("gormstore: stats of %s: %w", s.table, err)
	}
	return st, counts, nil
}

// stats adds the records in flight to st and counts.
func (t *inflight) stats(st *idemadmin.Stats, counts map[string]int64, now int64) {
	for i := range t.shards {
		sh := &t.shards[i]
		sh.mu.Lock()
		for k, f := range sh.m {
			created, lease := fromNanos(f.created), fromNanos(f.lease)
			if st.InFlight == 0 || created.Before(st.OldestInFlight) {
				st.OldestInFlight = created
			}
			if st.InFlight == 0 || lease.Before(st.OldestLeaseEnd) {
				st.OldestLeaseEnd = lease
			}
			st.InFlight++
			if f.expired(now) {
				st.Expired++
			}
			counts[hex.EncodeToString(k[:32])]++
		}
		sh.mu.Unlock()
	}
}

// adminStatements are the statements of the operator's calls, which are
// rare: rendered when called.
type adminStatements struct {
	forget, byState, expired, topScopes string
}

func (s *Store) adminSQL() adminStatements {
	w := &sqlWriter{db: s.db}
	t := s.sql.quotedTableName
	var q adminStatements
	w.s("DELETE FROM " + t + " WHERE ").id(colScope).s(" = ? AND ").id(colKey).s(" = ? AND ").
		id(colToken).s(" = ? AND ").id(colState).s(" = ?")
	q.forget = w.done()
	w.s("SELECT ").id(colState).s(", count(*), min(").id(colCreatedAt).s("), min(").id(colLeaseUntil).
		s(") FROM " + t + " GROUP BY ").id(colState)
	q.byState = w.done()
	w.s("SELECT count(*) FROM " + t + " WHERE ").id(colExpiresAt).s(" <= ? AND (").id(colState).
		s(" = " + stateCompleted + " OR ").id(colLeaseUntil).s(" <= ?)")
	q.expired = w.done()
	w.s("SELECT ").id(colScope).s(", count(*) FROM " + t + " GROUP BY ").id(colScope).
		s(" ORDER BY count(*) DESC LIMIT ?")
	q.topScopes = w.done()
	return q
}

// Reader reads a store's table for an operator without taking part in it:
// it takes no lock on a SQLite file, starts no purger and writes nothing,
// so it may look at a SQLite file that a running process holds. There,
// the records in flight live in that process's memory: a Reader sees the
// completed records only (ask that process, through idemadmin.Handler, for
// the others).
type Reader struct{ s *Store }

// NewReader returns a Reader of the table of db that a Store with the same
// WithTable option writes; the other options are ignored. Open a SQLite
// file read-only for it (sqlitedb.OpenReadOnly).
func NewReader(db *gorm.DB, opts ...Option) (*Reader, error) {
	if db == nil {
		return nil, errors.New("gormstore: nil *gorm.DB")
	}
	o := options{table: DefaultTable, purge: purge.Defaults(0, DefaultPurgeBatch), logger: slog.Default()}
	for _, opt := range opts {
		opt(&o)
	}
	s, err := build(db, o)
	if err != nil {
		return nil, err
	}
	close(s.purgeDone)
	return &Reader{s: s}, nil
}

// Inspect is idemadmin.Store's Inspect, on the table alone.
func (r *Reader) Inspect(ctx context.Context, id idem.ID) (idemadmin.Info, error) {
	return r.s.Inspect(ctx, id)
}

// Locate implements idemadmin.Locator, as the Store's.
func (r *Reader) Locate(id idem.ID) string { return r.s.Locate(id) }

// RecordStats is idemadmin.Store's RecordStats, on the table alone. On
// SQLite its Note says that records in flight are not counted.
func (r *Reader) RecordStats(ctx context.Context, now time.Time, topScopes int) (idemadmin.Stats, error) {
	st, err := r.s.RecordStats(ctx, now, topScopes)
	if err == nil && r.s.dialect == dialectSQLite {
		st.Note = SQLiteReaderNote
	}
	return st, err
}

// SQLiteReaderNote is what a Reader on SQLite cannot see.
const SQLiteReaderNote = "SQLite keeps the records in flight in the memory of the process that holds the file: " +
	"read from the file, only completed records are seen (ask that process's admin endpoint for the others)"
