package gormstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	idem "github.com/idemkit/idemkit/core"
	"gorm.io/gorm"
)

// On PostgreSQL a request's transaction ends in one round trip: the
// completion's UPDATE and the COMMIT go to the server as one query string
// (commitQuery), where through database/sql they would be two. database/sql
// has no way to end a *sql.Tx other than its own COMMIT or ROLLBACK, so Tx
// begins such a transaction itself, with BEGIN on a connection taken from
// the pool (connTx), and hands the handler a GORM session on it.
//
// The query carries its values as literals, as a query string of several
// statements takes no parameters: integers, and byte strings as hex digits
// decoded by the server, so that no value can end a literal. The UPDATE
// stays fenced: it is a data-modifying WITH whose SELECT divides by the
// number of rows it updated, so that an UPDATE that found no record held
// by the request's token fails (division by zero), and the server skips
// the COMMIT that follows it in the string; the store then rolls back.
//
// The store asks the server once, at the first request that has a
// transaction slot, whether the driver sends a statement without arguments
// as one query string of several statements (pgx and lib/pq do): if the
// server refuses it, transactions are begun and ended through GORM as on
// the other databases.

// sqlStateDivisionByZero is PostgreSQL's error code for a division by
// zero: the completion's UPDATE found no record held by the token.
const sqlStateDivisionByZero = "22012"

// Values of Store.oneTrip.
const (
	tripUnknown int32 = iota
	tripYes
	tripNo
)

// canOneTrip reports whether s ends a request's transaction in one round
// trip, asking the server the first time: whether a statement without
// arguments on its pool can hold several statements, as the completion's
// query string does. A failure that is not the server's answer (ctx ended,
// the connection failed) leaves the question open for a later request,
// which this one leaves to GORM.
func (s *Store) canOneTrip(ctx context.Context) bool {
	switch s.oneTrip.Load() {
	case tripYes:
		return true
	case tripNo:
		return false
	}
	_, err := s.pool.ExecContext(ctx, "SELECT 1; SELECT 2")
	var coded interface{ SQLState() string }
	switch {
	case err == nil:
		s.oneTrip.Store(tripYes)
		return true
	case errors.As(err, &coded):
		s.oneTrip.Store(tripNo)
	}
	return false
}

// connTx is a request's transaction on PostgreSQL, begun by Tx with BEGIN
// on a connection of its own, as GORM sees it: a connection pool that is a
// transaction (gorm.TxCommitter), so that GORM nests its Transaction
// calls in savepoints. Once ended, it refuses statements, as a *sql.Tx
// does.
type connTx struct {
	conn *sql.Conn
	mu   sync.Mutex // guards ended
	// ended: the transaction was committed or rolled back (or its end was
	// attempted) and the connection went back to the pool.
	ended bool
}

var (
	_ gorm.ConnPool    = (*connTx)(nil)
	_ gorm.TxCommitter = (*connTx)(nil)
)

// beginConnTx takes a connection of pool and begins a transaction on it.
func beginConnTx(ctx context.Context, pool *sql.DB) (*connTx, error) {
	conn, err := pool.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &connTx{conn: conn}, nil
}

func (t *connTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return t.conn.PrepareContext(ctx, query)
}

func (t *connTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.conn.ExecContext(ctx, query, args...)
}

func (t *connTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.conn.QueryContext(ctx, query, args...)
}

func (t *connTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return t.conn.QueryRowContext(ctx, query, args...)
}

// Commit commits the transaction; the store calls it (see Tx).
func (t *connTx) Commit() error { return t.end(context.Background(), "COMMIT") }

// Rollback rolls the transaction back.
func (t *connTx) Rollback() error { return t.end(context.Background(), "ROLLBACK") }

// end runs query, which ends the transaction, and gives the connection
// back to the pool. A connection left in a transaction (the query failed
// on the way) is not reused: the driver discards it when the pool takes it
// back (pgx checks the transaction status there), and the server rolls
// its transaction back when it closes.
func (t *connTx) end(ctx context.Context, query string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ended {
		return sql.ErrTxDone
	}
	t.ended = true
	_, err := t.conn.ExecContext(ctx, query)
	if cerr := t.conn.Close(); err == nil && !errors.Is(cerr, sql.ErrConnDone) {
		err = cerr
	}
	return err
}

// connTxOf returns the connTx under tx, a request's transaction.
func connTxOf(tx *gorm.DB) (*connTx, bool) {
	if tx == nil {
		return nil, false
	}
	ct, ok := tx.Statement.ConnPool.(*connTx)
	return ct, ok
}

// completeAndCommit runs the completion (query, the rendering of
// completeCommit for its arguments) and the COMMIT in one round trip. A
// completion that found no record held by the token is rolled back and
// reported as idem.ErrLockLost; every failure wraps idem.ErrRolledBack.
func (t *connTx) completeAndCommit(ctx context.Context, query string) error {
	t.mu.Lock()
	if t.ended {
		t.mu.Unlock()
		return fmt.Errorf("gormstore: complete: %w: %w", idem.ErrRolledBack, sql.ErrTxDone)
	}
	_, err := t.conn.ExecContext(ctx, query)
	t.mu.Unlock()
	if err == nil {
		t.mu.Lock()
		t.ended = true
		t.mu.Unlock()
		_ = t.conn.Close()
		return nil
	}
	// The server skipped the COMMIT, or it failed: either way nothing of
	// the transaction stays. The ROLLBACK ends a transaction the failure
	// left open.
	_ = t.Rollback()
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) && coded.SQLState() == sqlStateDivisionByZero {
		// Another request took the key over: the handler's writes must
		// not land beside its successor's.
		return fmt.Errorf("gormstore: complete: %w: %w", idem.ErrRolledBack, idem.ErrLockLost)
	}
	return fmt.Errorf("gormstore: complete: commit: %w: %w", idem.ErrRolledBack, err)
}

// completeCommitQuery renders the completion with args (Complete's
// arguments for the complete statement) as literals, followed by COMMIT,
// as one query string; parts are the complete statement cut at its
// placeholders.
func completeCommitQuery(parts []string, args []any) (string, error) {
	if len(args) != len(parts)-1 {
		return "", fmt.Errorf("gormstore: %d arguments for %d placeholders", len(args), len(parts)-1)
	}
	var b strings.Builder
	size := 128
	for _, p := range parts {
		size += len(p)
	}
	for _, a := range args {
		if v, ok := a.([]byte); ok {
			size += 2*len(v) + 24
		} else if v, ok := a.(blob); ok {
			size += 2*len(v) + 24
		} else {
			size += 48
		}
	}
	b.Grow(size)
	b.WriteString("WITH u AS (")
	for i, p := range parts {
		b.WriteString(p)
		if i == len(args) {
			break
		}
		switch v := args[i].(type) {
		case int:
			b.WriteString(strconv.Itoa(v))
		case int64:
			b.WriteString(strconv.FormatInt(v, 10))
		case []byte:
			writeBytes(&b, v)
		case blob:
			writeBytes(&b, v)
		case string:
			b.WriteString("convert_from(")
			writeBytes(&b, []byte(v))
			b.WriteString(", 'UTF8')")
		default:
			return "", fmt.Errorf("gormstore: no literal for a %T", v)
		}
	}
	b.WriteString(" RETURNING 1) SELECT 1 / count(*) FROM u; COMMIT")
	return b.String(), nil
}

// writeBytes writes v as a bytea literal, NULL for nil.
func writeBytes(b *strings.Builder, v []byte) {
	if v == nil {
		b.WriteString("NULL")
		return
	}
	b.WriteString("decode('")
	var buf [64]byte
	for len(v) > 0 {
		n := min(len(v), len(buf)/2)
		hex.Encode(buf[:], v[:n])
		b.Write(buf[:2*n])
		v = v[n:]
	}
	b.WriteString("', 'hex')")
}
