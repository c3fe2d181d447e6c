package gormstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/internal/acquireorder"
	"github.com/idemkit/idemkit/internal/purge"
	"gorm.io/gorm"
)

// Store is an idem.Store keeping records in one SQL table through GORM.
// Create it with New, create its table with AutoMigrate (or your own
// migrations, see SchemaSQL), and stop its purger with Close.
type Store struct {
	db      *gorm.DB // the user's, on a session whose logger is silent
	pool    *sql.DB  // db's connection pool
	dialect dialect
	sql     statements
	table   string

	purge  purge.Options
	base   time.Time // when New ran: the purger's clock readings are measured from it
	logger *slog.Logger
	// meter times the purger's batches and pause waits between them (see
	// purgeExpired); tests replace both.
	meter func() time.Time
	pause func(ctx context.Context, d time.Duration) bool

	busy busyTimeouts // SQLite connections' own busy timeouts
	// local is the store's share of its SQLite file: the records in
	// flight and the writer (see local.go). nil on a database server.
	local *localState
	// order says whether Acquire on PostgreSQL reads before it inserts
	// (see acquire).
	order acquireorder.Order

	stopPurge context.CancelFunc
	purgeDone chan struct{}
	closeOnce sync.Once
	// calls counts the calls under way, Acquire's writes left running
	// after their caller gave up among them (see acquireDetached), and
	// refuses new ones once Close has begun.
	calls        *calls
	closeTimeout time.Duration

	// txStmts holds, per connection pool a request's transaction ran on
	// (*sql.DB), the completion statement prepared there (*sql.Stmt): see
	// execInTx.
	txStmts sync.Map

	// beforeCommit, if set, runs between the completion's UPDATE and the
	// COMMIT of a request's transaction. Tests use it to crash there.
	beforeCommit func(tx *gorm.DB)
	// onStatement, if set, sees each statement of the store's hot path
	// (see session.hook). Tests use it to act at a statement.
	onStatement func(ctx context.Context, query string) (after func(n int64, err error))
}

var _ idem.Store = (*Store)(nil)

// maxAttempts bounds Acquire's retries when the record changes between its
// statements. Each retry means another request wrote the record meanwhile,
// so two or three attempts settle every real race.
const maxAttempts = 10

// New returns a Store writing to db's database and starts its purger
// (unless disabled with WithPurgeInterval(0)). db's dialector must be SQLite
// (github.com/glebarez/sqlite, as sqlitedb opens it), PostgreSQL
// (gorm.io/driver/postgres) or MySQL/MariaDB (gorm.io/driver/mysql). New
// creates no table: call AutoMigrate, or apply SchemaSQL yourself.
//
// On SQLite the store serves one process: New locks the database file
// against the stores of other processes (a file named after it, with
// "-idemkit.lock" appended, which it never deletes) and fails, naming the
// file, if another process holds it (an error wrapping ErrFileHeld). The stores of one process share the
// lock, which the last one's Close lets go. As the lock is named after the
// path, New refuses a file with more than one name (hard links), which a
// process on another name would lock apart. New also takes one connection
// of db's pool for the store's writes (none from a pool of one), and
// deletes the records in flight a process that died left in the table.
// The store's statements never reach db's logger, which would print them
// with their values: their failures are returned as errors. The statements
// of its calls run on db's connection pool through database/sql, past
// GORM's callbacks; migrations, batch renewals and the completion in a
// request's transaction (Tx) go through GORM.
func New(db *gorm.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, errors.New("gormstore: nil *gorm.DB")
	}
	o := options{
		table:        DefaultTable,
		purge:        purge.Defaults(DefaultPurgeInterval, DefaultPurgeBatch),
		logger:       slog.Default(),
		closeTimeout: DefaultCloseTimeout,
	}
	for _, opt := range opts {
		opt(&o)
	}
	s, err := build(db, o)
	if err != nil {
		return nil, err
	}
	if s.dialect == dialectSQLite {
		if err := s.openSQLite(); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopPurge = cancel
	if s.purge.Interval > 0 {
		go s.purgeLoop(ctx)
	} else {
		close(s.purgeDone)
	}
	return s, nil
}

// build is a Store on db with options o, that has not opened its SQLite
// file nor started its purger.
func build(db *gorm.DB, o options) (*Store, error) {
	d, err := dialectOf(db)
	if err != nil {
		return nil, err
	}
	if err := checkTableName(o.table); err != nil {
		return nil, err
	}
	s := &Store{
		db:           db.Session(&gorm.Session{Logger: silent{}}),
		dialect:      d,
		sql:          buildStatements(db, d, o.table),
		table:        o.table,
		purge:        o.purge,
		base:         time.Now(),
		logger:       o.logger,
		meter:        time.Now,
		pause:        sleepCtx,
		purgeDone:    make(chan struct{}),
		calls:        newCalls(),
		closeTimeout: o.closeTimeout,
	}
	if s.pool, err = db.DB(); err != nil {
		return nil, fmt.Errorf("gormstore: the connection pool: %w", err)
	}
	return s, nil
}

// newTimeout bounds what New does on SQLite's database: to find its file,
// take a connection for the writer and free what a dead process left.
const newTimeout = 30 * time.Second

// openSQLite registers s on its SQLite file (see local.go) and frees the
// records in flight a dead process left in its table.
func (s *Store) openSQLite() (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), newTimeout)
	defer cancel()
	if s.local, err = s.openLocal(ctx); err != nil {
		return err
	}
	s.calls.onIdle = s.local.close
	if err := s.freeLeftovers(ctx); err != nil {
		s.local.close()
		return fmt.Errorf("gormstore: free the records in flight left in %s: %w", s.table, err)
	}
	return nil
}

// checkTableName accepts "table" or "schema.table", each part made of ASCII
// letters, digits and underscores, so that every derived name (the expiry
// index) is valid and short enough on every dialect.
func checkTableName(name string) error {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return fmt.Errorf("gormstore: table name %q: at most one schema qualifier", name)
	}
	for _, p := range parts {
		if p == "" || len(p) > 48 {
			return fmt.Errorf("gormstore: table name %q: each part must have 1 to 48 bytes", name)
		}
		for _, c := range []byte(p) {
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				return fmt.Errorf("gormstore: table name %q: only letters, digits and underscores", name)
			}
		}
	}
	return nil
}

// Table returns the name of the table holding the records.
func (s *Store) Table() string { return s.table }

// SchemaSQL returns the statements that create the table and its expiry
// index for the store's dialect, for those who run migrations themselves.
// AutoMigrate executes exactly these.
func (s *Store) SchemaSQL() []string {
	return append([]string(nil), s.sql.createTable...)
}

// AutoMigrate creates the table and its expiry index unless they exist. It
// does not alter an existing table, and fails on one created by an earlier
// version of the store, whose key columns differ.
func (s *Store) AutoMigrate(ctx context.Context) error {
	if err := s.calls.begin(); err != nil {
		return err
	}
	defer s.calls.end()
	err := s.run(ctx, func(x session) error {
		for _, stmt := range s.sql.createTable {
			if err := s.gorm(x).Exec(stmt).Error; err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("gormstore: migrate %s: %w", s.table, err)
	}
	if err := s.run(ctx, func(x session) error { return s.gorm(x).Exec(s.sql.checkSchema).Error }); err != nil {
		return fmt.Errorf("gormstore: table %s exists without the columns %s and %s: it was created by an earlier "+
			"version of the store; recreate it (README, \"Upgrading\"): %w", s.table, colScope, colKey, err)
	}
	if s.local != nil {
		if err := s.freeLeftovers(ctx); err != nil {
			return fmt.Errorf("gormstore: free the records in flight left in %s: %w", s.table, err)
		}
	}
	return nil
}

// hashID returns the values of id's key columns: the SHA-256 of its scope
// and of its key. Any byte string, of any length, is then a valid scope or
// key on every dialect (not UTF-8, holding NUL, a JWT of 1 KB used as
// tenant), compared exactly (no collation folds case or pads spaces), and
// never cut to a column's length; two different scopes or keys would need
// a SHA-256 collision to share a record. The database never holds the
// values themselves, so tenants' credentials used as scopes are not kept at
// rest either; Get and Acquire return the caller's own ID.
func hashID(id idem.ID) (scope, key blob) {
	s, k := sha256.Sum256([]byte(id.Scope)), sha256.Sum256([]byte(id.Key))
	return s[:], k[:]
}

// blob is a binary statement argument. GORM expands a plain []byte that
// directly follows "(" in raw SQL into a list of its bytes, as for an IN
// list; a driver.Valuer is always bound as one value.
type blob []byte

// Value implements driver.Valuer.
func (b blob) Value() (driver.Value, error) { return []byte(b), nil }

// nanos is t as stored: Unix nanoseconds.
func nanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// Acquire implements idem.Store.
//
// On SQLite the key's completed record is read from the table (a read
// never waits for the write lock), and a new key, an expired record or a
// lapsed lease is taken in memory, where records in flight live (see
// local.go): a new key writes nothing until it completes.
//
// On PostgreSQL and MySQL a new key is taken by an INSERT that does
// nothing (PostgreSQL) or fails (MySQL) if the key is taken already, and a
// live record is found by an indexed read that takes no lock and writes
// nothing. On PostgreSQL which comes first follows the traffic (package
// acquireorder): while new keys are the more common, the INSERT, so that a
// new key is one statement and a replay two; in a storm of retries, the
// read, so that a replay or a conflict is one and a new key two. MySQL
// always reads first: there an INSERT that meets a taken key locks the
// row (shared), and several such INSERTs waiting on a row being deleted
// (a Release, a purge) deadlock with each other once the delete commits,
// which a read beforehand makes rare. An expired record or a lapsed lease
// is taken by an UPDATE whose WHERE clause repeats the condition.
// Each write is one statement that writes only if the record is still as
// expected; if another request wrote in between, it changes nothing, and
// Acquire starts over.
//
// Acquire returns by ctx's deadline, and a write of it must not land
// after it reported the failure, leaving an in-flight record nobody holds
// (every retry would get 409 until its lease ran out). A database server
// commits a statement its client abandoned: see acquireDetached.
func (s *Store) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	if err := s.calls.begin(); err != nil {
		return idem.Record{}, 0, err
	}
	defer s.calls.end()
	if err := ctx.Err(); err != nil {
		return idem.Record{}, 0, err
	}
	var (
		rec     idem.Record
		outcome idem.AcquireOutcome
		err     error
	)
	if s.local != nil {
		rec, outcome, err = s.acquireLocal(ctx, a)
	} else {
		rec, outcome, err = s.acquireDetached(ctx, a)
	}
	if err != nil {
		return idem.Record{}, 0, fmt.Errorf("gormstore: acquire: %w", err)
	}
	if outcome != idem.AcquireExisting {
		rec = s.acquired(ctx, a)
	}
	return rec, outcome, nil
}

// acquireDetached runs Acquire's statements on a database server on a
// connection of its own, detached from ctx's cancellation and bounded by
// the lease (after which a record left behind could be taken over
// anyway), and returns when they are done or ctx ends, whichever comes
// first. Waiting for the connection follows ctx: no statement has been
// sent yet. If the caller has gone when the statements are done and they
// took the key, the record is released on the same connection, fenced by
// the caller's token: nobody else will. The Engine releases what a failed
// Acquire may have written too, but its release can reach the server
// before a write still under way there.
func (s *Store) acquireDetached(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	conn, err := s.pool.Conn(ctx)
	if err != nil {
		return idem.Record{}, 0, err
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.LeaseUntil.Sub(a.Now))
	x := s.session(wctx, conn)
	type result struct {
		rec     idem.Record
		outcome idem.AcquireOutcome
		err     error
	}
	var (
		mu   sync.Mutex
		gone bool // the caller returned without the result
	)
	done := make(chan result, 1)
	s.calls.hold() // Close waits for the writes, which may outlive the call
	go func() {
		defer s.calls.end()
		defer cancel()
		defer conn.Close()
		rec, outcome, err := s.acquire(x, a)
		mu.Lock()
		abandoned := gone
		if !abandoned {
			done <- result{rec, outcome, err}
		}
		mu.Unlock()
		if abandoned && err == nil && outcome != idem.AcquireExisting {
			scope, key := hashID(a.ID)
			_, _ = x.exec(s.sql.native.release, scope, key, a.Token)
		}
	}()
	select {
	case r := <-done:
		return r.rec, r.outcome, r.err
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case r := <-done: // finished meanwhile: the caller holds what it took
		return r.rec, r.outcome, r.err
	default:
		gone = true
		return idem.Record{}, 0, ctx.Err()
	}
}

// acquire is Acquire's work on a database server, on x. It returns the
// record found if the outcome is Existing.
func (s *Store) acquire(x session, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	fp := blob(a.Fingerprint[:])
	now, lease, expires := nanos(a.Now), nanos(a.LeaseUntil), nanos(a.ExpiresAt)
	scope, key := hashID(a.ID)
	st := &s.sql.native
	insertFirst := s.dialect == dialectPostgres && !s.order.ReadFirst()
	for range maxAttempts {
		rec, err := idem.Record{}, idem.ErrNotFound
		if !insertFirst {
			rec, err = s.get(x, a.ID, scope, key)
		}
		insertFirst = false
		if errors.Is(err, idem.ErrNotFound) {
			created, err := s.insert(x, scope, key, fp, a.Token, lease, now, expires)
			if err != nil {
				return idem.Record{}, 0, err
			}
			if created {
				s.order.Saw(false)
				return idem.Record{}, idem.AcquireCreated, nil
			}
			continue // the key is taken, or was taken meanwhile: read it
		}
		if err != nil {
			return idem.Record{}, 0, err
		}
		var (
			outcome = idem.AcquireCreated
			stmt    string
			args    []any
		)
		switch {
		case rec.Expired(a.Now):
			stmt, args = st.replaceExpired, []any{fp, a.Token, lease, now, expires, scope, key, now, now}
		case rec.State == idem.InFlight && !a.Now.Before(rec.LeaseUntil) && rec.Fingerprint == a.Fingerprint:
			outcome = idem.AcquireTookOver
			stmt, args = st.takeOverLapsed, []any{a.Token, lease, now, expires, scope, key, now, now, fp}
		default:
			s.order.Saw(true)
			return rec, idem.AcquireExisting, nil
		}
		n, err := x.exec(stmt, args...)
		if err != nil {
			return idem.Record{}, 0, err
		}
		if n == 1 {
			s.order.Saw(false)
			return idem.Record{}, outcome, nil
		}
		// The record changed, was released or purged meanwhile.
	}
	return idem.Record{}, 0, fmt.Errorf("the record kept changing; gave up after %d attempts", maxAttempts)
}

// insert writes a new in-flight record unless one exists for the ID, and
// reports whether it did.
func (s *Store) insert(x session, scope, key, fp blob, token string, lease, now, expires int64) (bool, error) {
	n, err := x.exec(s.sql.native.insert, scope, key, fp, token, lease, now, expires)
	if err != nil {
		// MySQL has no DO NOTHING that reports reliably whether it wrote
		// (INSERT IGNORE would also truncate overlong values silently), so
		// there a plain INSERT fails on a taken key.
		if s.dialect == dialectMySQL && s.isDuplicate(err) {
			return false, nil
		}
		return false, err
	}
	return n == 1, nil
}

// isDuplicate reports whether err is a duplicate-key error, whether or not
// the user's gorm.Config translates errors.
func (s *Store) isDuplicate(err error) bool {
	if errors.Is(err, gorm.ErrDuplicatedKey) {
		return true
	}
	t, ok := s.db.Dialector.(gorm.ErrorTranslator)
	return ok && errors.Is(t.Translate(err), gorm.ErrDuplicatedKey)
}

// acquired returns the record a's caller now holds, as Get would return it,
// and tells the request's transaction slot, if any, which lock it serves.
func (s *Store) acquired(ctx context.Context, a idem.Acquire) idem.Record {
	if sl := slotFrom(ctx); sl != nil {
		var turn chan struct{}
		if s.local != nil {
			turn = s.local.file.turn
		}
		sl.arm(a.Token, turn)
	}
	return idem.Record{
		ID:          a.ID,
		Fingerprint: a.Fingerprint,
		State:       idem.InFlight,
		Token:       a.Token,
		LeaseUntil:  fromNanos(nanos(a.LeaseUntil)),
		ExpiresAt:   fromNanos(nanos(a.ExpiresAt)),
		CreatedAt:   fromNanos(nanos(a.Now)),
	}
}

// Renew implements idem.Store with one conditional UPDATE.
func (s *Store) Renew(ctx context.Context, id idem.ID, token string, leaseUntil time.Time) error {
	if err := s.calls.begin(); err != nil {
		return err
	}
	defer s.calls.end()
	if s.local != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		return s.renewLocal(id, token, leaseUntil)
	}
	lost := false
	err := s.run(ctx, func(x session) error {
		scope, key := hashID(id)
		n, err := x.exec(s.sql.native.renew, nanos(leaseUntil), scope, key, token)
		if err != nil {
			return err
		}
		if n == 0 && s.dialect == dialectMySQL {
			// MySQL counts changed rows, not matched ones: renewing to the
			// lease already stored changes nothing, yet the token holds.
			var one int
			switch err := x.row(s.sql.native.checkOwner, scope, key, token).Scan(&one); {
			case err == nil:
				return nil
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
		}
		lost = n == 0
		return nil
	})
	switch {
	case err != nil:
		return fmt.Errorf("gormstore: renew: %w", err)
	case lost:
		return idem.ErrLockLost
	}
	return nil
}

// Complete implements idem.Store with one conditional UPDATE, or on SQLite
// the INSERT of the completed record (see completeLocal). If the request's
// context carries a transaction begun with Tx, the statement runs in it
// and Complete commits it: the handler's writes and the stored response
// become visible together, or not at all.
func (s *Store) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	if err := s.calls.begin(); err != nil {
		// The request's transaction would wait for a commit that never
		// comes: its writes go with the completion.
		if tx, turn, _ := takeTx(ctx, token); tx != nil {
			tx.Rollback()
			leave(turn)
			return fmt.Errorf("gormstore: complete: %w: %w", idem.ErrRolledBack, err)
		}
		return err
	}
	defer s.calls.end()
	if err := ctx.Err(); err != nil {
		return err
	}
	scope, key := hashID(id)
	args := []any{c.Response.Status, appendHeader(nil, c.Response.Header), c.Response.Body,
		nanos(c.CompletedAt), nanos(c.ExpiresAt), scope, key, token}
	tx, turn, err := takeTx(ctx, token)
	if err != nil {
		return err
	}
	defer leave(turn)
	if s.local != nil {
		return s.completeLocal(ctx, scope, key, token, tx, args)
	}
	if tx != nil {
		return s.completeInTx(ctx, tx, func(ctx context.Context) (int64, error) {
			// On a plain database/sql transaction, past GORM's statement
			// building, as the store's other statements run.
			if sqlTx, ok := tx.Statement.ConnPool.(*sql.Tx); ok {
				res, err := sqlTx.ExecContext(ctx, s.sql.native.complete, args...)
				if err != nil {
					return 0, err
				}
				return res.RowsAffected()
			}
			res := quietTx(ctx, tx).Exec(s.sql.complete, args...)
			return res.RowsAffected, res.Error
		})
	}
	return s.fenced(ctx, "complete", s.sql.native.complete, args...)
}

// fenced runs the call op, one UPDATE or DELETE of the in-flight record
// its args name with their token, and returns idem.ErrLockLost if it
// found none.
func (s *Store) fenced(ctx context.Context, op, stmt string, args ...any) error {
	var n int64
	err := s.run(ctx, func(x session) (err error) {
		n, err = x.exec(stmt, args...)
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("gormstore: %s: %w", op, err)
	case n == 0:
		return idem.ErrLockLost
	}
	return nil
}

// completeInTx runs exec, the completion, in the request's transaction tx
// with ctx, and commits it; exec returns the number of rows it wrote.
func (s *Store) completeInTx(ctx context.Context, tx *gorm.DB, exec func(ctx context.Context) (int64, error)) error {
	// Every failure here rolls the handler's writes back with the
	// completion: the error says so (idem.ErrRolledBack), so that the
	// adapter withholds the response that describes them.
	// The transaction is the user's, with the user's logger. It holds its
	// connection, and on SQLite the write lock already: the UPDATE never
	// waits for it. SQLite's statements never get a cancellable context
	// (see runSQLite).
	if s.dialect == dialectSQLite {
		ctx = context.WithoutCancel(ctx)
	}
	n, err := exec(ctx)
	if err != nil {
		tx.Rollback()
		return fmt.Errorf("gormstore: complete: %w: %w", idem.ErrRolledBack, err)
	}
	if n == 0 {
		// Another request took the key over: the handler's writes must not
		// land beside its successor's.
		tx.Rollback()
		return fmt.Errorf("gormstore: complete: %w: %w", idem.ErrRolledBack, idem.ErrLockLost)
	}
	if s.beforeCommit != nil {
		s.beforeCommit(tx)
	}
	if err := tx.Commit().Error; err != nil {
		return fmt.Errorf("gormstore: complete: commit: %w: %w", idem.ErrRolledBack, err)
	}
	if s.local != nil {
		// The commit took the write-ahead log further: the writer's
		// checkpointer copies it back in its time, not the commit of a
		// later request. The caller holds the file's turn (see Tx).
		s.local.writer.committed()
	}
	return nil
}

// quietTx is the request's transaction tx as the store's statements run
// in it through GORM: with ctx, and a silent logger (the transaction is
// the user's, with the user's logger).
func quietTx(ctx context.Context, tx *gorm.DB) *gorm.DB {
	return tx.Session(&gorm.Session{Logger: silent{}, Context: ctx})
}

// execInTx runs query, in its native form, in the request's transaction
// db (a session on a *sql.Tx) with ctx as a statement prepared once per
// connection pool, past GORM's statement building. The SQLite driver
// sqlitedb's pool uses compiles a statement again at every execution all
// the same, prepared or not: at 16 requests at a time that compilation
// (SQLite's parser, and the engine's allocator mapping and unmapping
// memory for it) is about half the CPU time of a transactional request,
// where the store's own connection compiles its statements once (see
// local.go). ok is false when db is not a plain database/sql transaction
// (GORM's PrepareStmt mode, say) or the statement cannot be prepared: the
// caller then runs it through GORM.
func (s *Store) execInTx(ctx context.Context, db *gorm.DB, query string, args ...any) (n int64, ok bool, err error) {
	tx, isTx := db.Statement.ConnPool.(*sql.Tx)
	pool, isPool := db.Config.ConnPool.(*sql.DB)
	if !isTx || !isPool {
		return 0, false, nil
	}
	stmt, err := s.txStmt(pool, query)
	if err != nil {
		return 0, false, nil
	}
	res, err := tx.StmtContext(ctx, stmt).ExecContext(ctx, args...)
	if err != nil {
		return 0, true, err
	}
	n, err = res.RowsAffected()
	return n, true, err
}

// txStmt returns query prepared on pool, preparing it at the first call.
// Only the completion's statement is prepared so, once per pool: the
// statements live as long as the pool.
func (s *Store) txStmt(pool *sql.DB, query string) (*sql.Stmt, error) {
	if st, ok := s.txStmts.Load(pool); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := pool.Prepare(query)
	if err != nil {
		return nil, err
	}
	if prev, loaded := s.txStmts.LoadOrStore(pool, st); loaded {
		st.Close()
		return prev.(*sql.Stmt), nil
	}
	return st, nil
}

// Release implements idem.Store with one conditional DELETE; on SQLite it
// drops the record in flight from memory. A transaction begun with Tx for
// the request is rolled back first, and then the error wraps
// idem.ErrRolledBack (alone if the record was released): the handler's
// writes are undone, so the Engine withholds a response that reports them.
func (s *Store) Release(ctx context.Context, id idem.ID, token string) error {
	undone := undoTx(ctx, token)
	err := s.release(ctx, id, token)
	switch {
	case undone == nil:
		return err
	case err != nil:
		return fmt.Errorf("%w; %w", undone, err)
	}
	return undone
}

// undoTx rolls back the transaction begun with Tx for the lock token
// holds, if any, and returns an error wrapping idem.ErrRolledBack if the
// handler's writes were undone, now or by the slot's cleanup before.
func undoTx(ctx context.Context, token string) error {
	tx, turn, err := takeTx(ctx, token)
	if tx != nil {
		tx.Rollback()
		leave(turn)
		return errTxUndone
	}
	return err // ErrTxAborted, or nil
}

// errTxUndone says that Release rolled the request's transaction back.
var errTxUndone = fmt.Errorf("gormstore: release: the request's transaction was rolled back: %w", idem.ErrRolledBack)

func (s *Store) release(ctx context.Context, id idem.ID, token string) error {
	if err := s.calls.begin(); err != nil {
		return err
	}
	defer s.calls.end()
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.local != nil {
		return s.releaseLocal(id, token)
	}
	scope, key := hashID(id)
	return s.fenced(ctx, "release", s.sql.native.release, scope, key, token)
}

// Get implements idem.Store with one read by primary key; on SQLite a
// record in flight is found in memory.
func (s *Store) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	if err := s.calls.begin(); err != nil {
		return idem.Record{ID: id}, err
	}
	defer s.calls.end()
	if s.local != nil {
		if err := ctx.Err(); err != nil {
			return idem.Record{ID: id}, err
		}
		return s.getLocal(ctx, id)
	}
	scope, key := hashID(id)
	var (
		rec    idem.Record
		getErr error
	)
	err := s.run(ctx, func(x session) error {
		rec, getErr = s.get(x, id, scope, key)
		if errors.Is(getErr, idem.ErrNotFound) {
			return nil
		}
		return getErr
	})
	if err != nil {
		return idem.Record{ID: id}, fmt.Errorf("gormstore: get: %w", err)
	}
	return rec, getErr
}

// get reads id's record, whose key columns hold scope and key (hashID).
func (s *Store) get(x session, id idem.ID, scope, key blob) (idem.Record, error) {
	var r recordRow
	if err := x.row(s.sql.native.selectRecord, scope, key).Scan(r.dest()...); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return idem.Record{ID: id}, idem.ErrNotFound
		}
		return idem.Record{ID: id}, err
	}
	return s.toRecord(id, key, &r)
}

// recordRow is a record as read, the columns of selectColumns in order.
// Columns are read as nullable, so that a damaged row is reported as such.
type recordRow struct {
	fp, header, body []byte
	state, lease     sql.NullInt64
	created          sql.NullInt64
	completed        sql.NullInt64
	expires, status  sql.NullInt64
	token            sql.NullString
}

func (r *recordRow) dest() []any {
	return []any{&r.fp, &r.state, &r.token, &r.lease, &r.created, &r.completed, &r.expires, &r.status, &r.header, &r.body}
}

// toRecord checks and converts the row of id, whose key hash is key.
func (s *Store) toRecord(id idem.ID, key blob, r *recordRow) (idem.Record, error) {
	rec := idem.Record{ID: id}
	state := idem.State(r.state.Int64)
	if len(r.fp) != len(rec.Fingerprint) || (state != idem.InFlight && state != idem.Completed) ||
		!r.token.Valid || !r.lease.Valid || !r.created.Valid || !r.expires.Valid {
		return rec, s.corrupt(key)
	}
	copy(rec.Fingerprint[:], r.fp)
	rec.State = state
	rec.Token = r.token.String
	rec.LeaseUntil = fromNanos(r.lease.Int64)
	rec.CreatedAt = fromNanos(r.created.Int64)
	rec.ExpiresAt = fromNanos(r.expires.Int64)
	if r.completed.Valid {
		rec.CompletedAt = fromNanos(r.completed.Int64)
	}
	if state == idem.Completed {
		h, err := decodeHeader(r.header)
		if err != nil {
			return rec, s.corrupt(key)
		}
		body := r.body
		if body == nil {
			body = []byte{}
		}
		rec.Response = exchange.Response{Status: int(r.status.Int64), Header: h, Body: body}
	}
	return rec, nil
}

// corrupt reports a damaged record. Its error is logged and recorded on
// spans, so it names the key as the Engine's events do (key_hash: the first
// 12 hex digits of its SHA-256), never in clear.
func (s *Store) corrupt(key blob) error {
	return fmt.Errorf("gormstore: the record with key_hash %s in table %s is corrupt", hex.EncodeToString(key[:6]), s.table)
}

// Purge implements idem.Store: one DELETE of at most limit expired records,
// found through the index on expires_at.
func (s *Store) Purge(ctx context.Context, now time.Time, limit int) (int, error) {
	if err := s.calls.begin(); err != nil {
		return 0, err
	}
	defer s.calls.end()
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if limit <= 0 {
		return 0, nil
	}
	if s.local != nil {
		return s.purgeLocal(ctx, now, limit)
	}
	n := nanos(now)
	var purged int64
	err := s.run(ctx, func(x session) (err error) {
		if s.dialect == dialectMySQL {
			purged, err = s.purgeMySQL(x, n, limit)
			return err
		}
		purged, err = x.exec(s.sql.native.purge, n, n, limit)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("gormstore: purge: %w", err)
	}
	return int(purged), nil
}

// purgeMySQL is Purge on MySQL: a plain read of the first limit expired
// records by expiry, which locks nothing, then one DELETE of those by
// primary key, each checked again. A single DELETE ... ORDER BY
// expires_at LIMIT locks every row it reads, by expiry, those it must
// leave included: the in-flight records of handlers that run past their
// expiry, whose leases a batch renewal locks at the same time, by key.
// The two deadlocked (error 1213) dozens of times a second. Now the purge
// locks only rows it deletes, by key, as a renewal does.
func (s *Store) purgeMySQL(x session, now int64, limit int) (int64, error) {
	rows, err := x.query(s.sql.purgeFind, now, now, limit)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	args := make([]any, 0, 2+2*limit)
	args = append(args, now, now)
	for rows.Next() {
		var scope, key []byte
		if err := rows.Scan(&scope, &key); err != nil {
			return 0, err
		}
		args = append(args, blob(scope), blob(key))
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	n := (len(args) - 2) / 2
	if n == 0 {
		return 0, nil
	}
	return x.exec(orJoined(s.sql.purgeHead, s.sql.byKey, n, ")"), args...)
}
