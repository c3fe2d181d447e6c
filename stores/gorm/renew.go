package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"gorm.io/gorm"
)

var _ idem.BatchRenewer = (*Store)(nil)

// renewChunk bounds the locks one statement of RenewBatch renews. Each
// takes three bind parameters, so a chunk stays far below every dialect's
// limit (SQLite 32,766, PostgreSQL and MySQL 65,535), and its condition
// short enough to plan in no time.
const renewChunk = 500

// RenewBatch implements idem.BatchRenewer: it renews every lease of held
// in one statement per renewChunk locks, all of them in one transaction
// when there are several (and always on MySQL). On SQLite and PostgreSQL
// the statement is an UPDATE ... RETURNING the rows it renewed. MySQL has
// no RETURNING and counts only the rows an UPDATE changed, not those it
// matched, so there the transaction first locks and reads the rows held
// (SELECT ... FOR UPDATE, under READ COMMITTED so that no gap is locked),
// then updates them. A lock whose row was not renewed is lost.
func (s *Store) RenewBatch(ctx context.Context, held []idem.Held, leaseUntil time.Time, lost []bool) error {
	if err := s.calls.begin(); err != nil {
		return err
	}
	defer s.calls.end()
	if len(lost) != len(held) {
		return fmt.Errorf("gormstore: renew batch: %d locks but %d lost flags", len(held), len(lost))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(held) == 0 {
		return nil
	}
	if s.local != nil {
		s.renewBatchLocal(held, leaseUntil, lost)
		return nil
	}
	var renewed map[string]struct{}
	chunks := func(tx *gorm.DB) error {
		renewed = make(map[string]struct{}, len(held))
		for start := 0; start < len(held); start += renewChunk {
			if err := s.renewChunk(tx, held[start:min(start+renewChunk, len(held))], nanos(leaseUntil), renewed); err != nil {
				return err
			}
		}
		return nil
	}
	err := s.run(ctx, func(x session) error {
		db := s.gorm(x)
		switch {
		case s.dialect == dialectMySQL:
			return db.Transaction(chunks, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		case len(held) <= renewChunk:
			return chunks(db)
		}
		return db.Transaction(chunks)
	})
	if err != nil {
		return fmt.Errorf("gormstore: renew batch: %w", err)
	}
	for i, h := range held {
		scope, key := hashID(h.ID)
		_, ok := renewed[heldKey(scope, key, h.Token)]
		lost[i] = !ok
	}
	return nil
}

// heldKey identifies a lock by its row and token.
func heldKey(scope, key []byte, token string) string {
	return string(scope) + string(key) + token
}

// renewChunk renews the leases of held, at most renewChunk locks, and adds
// each one it renewed to renewed.
func (s *Store) renewChunk(db *gorm.DB, held []idem.Held, leaseUntil int64, renewed map[string]struct{}) error {
	args := make([]any, 0, 1+3*len(held))
	args = append(args, leaseUntil)
	for _, h := range held {
		scope, key := hashID(h.ID)
		args = append(args, scope, key, h.Token)
	}
	if s.dialect != dialectMySQL {
		return s.collect(db, s.batchSQL(s.sql.renewBatchHead, len(held), s.sql.renewBatchTail), args, renewed)
	}
	n := len(renewed)
	if err := s.collect(db, s.batchSQL(s.sql.lockBatchHead, len(held), s.sql.lockBatchTail), args[1:], renewed); err != nil {
		return err
	}
	if len(renewed) == n {
		return nil // none of them is held any more
	}
	return db.Exec(s.batchSQL(s.sql.renewBatchHead, len(held), s.sql.renewBatchTail), args...).Error
}

// batchSQL is head, the condition on one lock n times joined by OR, then
// tail.
func (s *Store) batchSQL(head string, n int, tail string) string {
	return orJoined(head, s.sql.held, n, tail)
}

// orJoined is head, then cond n times joined by OR, then tail.
func orJoined(head, cond string, n int, tail string) string {
	var b strings.Builder
	b.Grow(len(head) + n*(len(cond)+4) + len(tail))
	b.WriteString(head)
	for i := range n {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString(cond)
	}
	b.WriteString(tail)
	return b.String()
}

// collect runs query, which returns the key hashes and token of rows, and
// adds each to into.
func (s *Store) collect(db *gorm.DB, query string, args []any, into map[string]struct{}) error {
	rows, err := db.Raw(query, args...).Rows()
	if err != nil {
		return err
	}
	if rows == nil {
		return errors.New("gormstore: GORM returned no rows")
	}
	defer rows.Close()
	var (
		scope, key []byte
		token      string
	)
	for rows.Next() {
		if err := rows.Scan(&scope, &key, &token); err != nil {
			return err
		}
		into[heldKey(scope, key, token)] = struct{}{}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}
