package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idemkit/stores/gorm/internal/sqlitefile"
)

// On SQLite the store serves one process: New takes an OS lock on the
// database file (lockSuffix), and a store of another process on the same
// file is refused. The lock is named after the file's path, so a file with
// a second name (a hard link) is refused too (sqlitefile.OneName). What
// that allows:
//
//   - Records in flight live in the process's memory (inflight), not in
//     the table: a new key costs one write, its completed record (or the
//     handler's transaction that carries it, see Tx), and a crash frees
//     every key it held at once, as nothing of them was written.
//   - The store takes no lease (OneProcess): nothing can be waiting to
//     take a key over, so a key is held until its handler ends.
//   - The stores of the process on one file write in turn (sqliteFile.turn),
//     each on a connection of its own (writer), so that a write never
//     waits in SQLite's busy handler, which sleeps 1, 2, 5, 10 ms ... and
//     let a request lose to others for tens of milliseconds.
//
// Every Store of the process on one file shares that file's lock, turn and
// records in flight (one inflight per table), through sqliteFiles.

// lockSuffix names the file next to the database that New locks: the
// database file itself is SQLite's to lock, and SQLite's POSIX locks are
// released when any descriptor of the file closes in the process.
const lockSuffix = "-idemkit.lock"

// sqliteFiles holds what the stores of this process share per SQLite
// database.
var sqliteFiles struct {
	sync.Mutex
	open []*sqliteFile
}

// sqliteFile is one SQLite database as the stores of this process share
// it.
type sqliteFile struct {
	path string      // "" for an in-memory database
	info os.FileInfo // path's, telling two paths to one file apart
	pool *sql.DB     // an in-memory database's pool: the database itself
	lock io.Closer   // the OS lock; nil for an in-memory database
	refs int         // the stores open on the file
	// turn has one slot: a store of this process writing to the file
	// holds it (see writer.write).
	turn    chan struct{}
	tables  map[string]*inflight // by the table's lower-case name
	writers map[*sql.DB]*writer  // one per connection pool
}

// localState is a Store's share of its file.
type localState struct {
	file   *sqliteFile
	table  *inflight
	writer *writer
	name   string // the table's key in file.tables
}

// openLocal finds or opens the file of s's table, takes the OS lock when
// the file is new to this process, and registers s on it. A second
// process on the file gets an error.
func (s *Store) openLocal(ctx context.Context) (*localState, error) {
	schema, name, qualified := strings.Cut(s.table, ".")
	if !qualified {
		schema, name = "main", s.table
	}
	path, err := databaseFile(ctx, s.pool, schema)
	if err != nil {
		return nil, err
	}
	var info os.FileInfo
	if path != "" {
		if info, err = os.Stat(path); err != nil {
			return nil, fmt.Errorf("gormstore: the SQLite file of schema %q: %w", schema, err)
		}
		if err := sqlitefile.OneName(path); err != nil {
			return nil, fmt.Errorf("gormstore: %w", err)
		}
	}
	sqliteFiles.Lock()
	defer sqliteFiles.Unlock()
	f := findFile(path, info, s.pool)
	if f == nil {
		f = &sqliteFile{path: path, info: info, turn: make(chan struct{}, 1),
			tables: map[string]*inflight{}, writers: map[*sql.DB]*writer{}}
		if path == "" {
			f.pool = s.pool
		} else if f.lock, err = lockFile(path + lockSuffix); err != nil {
			return nil, oneProcessError(path, err)
		}
		sqliteFiles.open = append(sqliteFiles.open, f)
	}
	w := f.writers[s.pool]
	if w == nil {
		if w, err = newWriter(s, f); err != nil {
			f.release()
			return nil, err
		}
		f.writers[s.pool] = w
	}
	w.refs++
	key := strings.ToLower(name)
	t := f.tables[key]
	if t == nil {
		t = newInflight()
		f.tables[key] = t
	}
	t.refs++
	f.refs++
	return &localState{file: f, table: t, writer: w, name: key}, nil
}

// findFile returns the file already open in this process that path (or,
// in memory, pool) names, or nil.
func findFile(path string, info os.FileInfo, pool *sql.DB) *sqliteFile {
	for _, f := range sqliteFiles.open {
		if path == "" && f.pool == pool || path != "" && f.info != nil && os.SameFile(f.info, info) {
			return f
		}
	}
	return nil
}

// close unregisters l's store; the last store on the file lets the OS
// lock go.
func (l *localState) close() {
	sqliteFiles.Lock()
	defer sqliteFiles.Unlock()
	if l.table.refs--; l.table.refs == 0 {
		delete(l.file.tables, l.name)
	}
	if l.writer.refs--; l.writer.refs == 0 {
		delete(l.file.writers, l.writer.pool)
		l.writer.close()
	}
	l.file.refs--
	l.file.release()
}

// release forgets f once no store uses it. The caller holds sqliteFiles.
func (f *sqliteFile) release() {
	if f.refs > 0 || len(f.writers) > 0 {
		return
	}
	if f.lock != nil {
		_ = f.lock.Close()
	}
	for i, g := range sqliteFiles.open {
		if g == f {
			sqliteFiles.open = append(sqliteFiles.open[:i], sqliteFiles.open[i+1:]...)
			break
		}
	}
}

// databaseFile returns the file of the attached database named schema, ""
// for an in-memory one.
func databaseFile(ctx context.Context, pool *sql.DB, schema string) (string, error) {
	rows, err := pool.QueryContext(ctx, "PRAGMA database_list")
	if err != nil {
		return "", fmt.Errorf("gormstore: list SQLite's databases: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			seq        int
			name, file string
		)
		if err := rows.Scan(&seq, &name, &file); err != nil {
			return "", fmt.Errorf("gormstore: list SQLite's databases: %w", err)
		}
		if strings.EqualFold(name, schema) {
			return file, nil
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("gormstore: list SQLite's databases: %w", err)
	}
	return "", fmt.Errorf("gormstore: no SQLite database is attached as %q", schema)
}

// errLocked is what lockFile returns when another process holds the lock.
var errLocked = errors.New("locked by another process")

// ErrFileHeld is New's error, wrapped with the file's name, when a store
// of another process holds the SQLite file (see New).
var ErrFileHeld = errors.New("a SQLite store serves one process; use PostgreSQL or MySQL to share keys between processes")

// oneProcessError is New's error when the lock on path cannot be taken.
func oneProcessError(path string, err error) error {
	if errors.Is(err, errLocked) {
		return fmt.Errorf("gormstore: the SQLite file %q is used by idemkit in another process (it holds %s): %w",
			path, path+lockSuffix, ErrFileHeld)
	}
	return fmt.Errorf("gormstore: lock the SQLite file %q (%s): %w", path, path+lockSuffix, err)
}

// writerBudget is how long a write waits at most for SQLite's write lock
// held by a connection that is not one of the store's (a request's
// transaction, the application's own writes) when its context sets no
// deadline: sqlitedb's busy timeout.
const writerBudget = 10 * time.Second

// checkpointEvery is how many commits of a writer make the WAL worth
// checkpointing: a completion appends 3.6 pages on average (the row, its
// key and its expiry, now and then a page split), so about 900 pages,
// under the 1000 at which a commit of another connection (a request's
// transaction) would checkpoint. Every 64 commits, the syncs that end
// each checkpoint took about 15 % off the throughput of new keys.
const checkpointEvery = 256

// ownConn is a connection of the writer's own to an SQLite file, which
// sqlitedb opens past database/sql (see sqlitedb's conn.go): it prepares
// each statement once, where the driver compiles it again on every call,
// and sets its busy timeout without a statement. gormstore links no SQLite
// engine itself: it finds sqlitedb's through a GORM plugin, connPlugin.
type ownConn interface {
	Exec(query string, args ...any) (int64, error)
	QueryRow(query string, args ...any) interface{ Scan(dest ...any) error }
	SetBusyTimeout(ms int) error
	Close() error
}

// connPlugin is the name of the plugin sqlitedb.Open installs on the
// *gorm.DB it returns, and the method through which it opens an ownConn.
const connPlugin = "idemkit:sqlite-conn"

type connOpener interface {
	OpenConn(path string) (any, error)
}

// writer holds the connections the stores of this process on one file
// run their statements on, one writer per connection pool, each a
// connection of its own (ownConn) with a busy timeout of 0:
//
//   - own, for writes: the stores take turns in Go (sqliteFile.turn)
//     instead of in SQLite's busy handler, and only a connection that is
//     not one of theirs (a request's transaction) makes a write wait, in
//     slices (see Store.waitBusy). Its commits never checkpoint the
//     write-ahead log: the writer's checkpointer does, off the requests'
//     path.
//   - reader, for reads, in turns of their own (readTurn): a read (a
//     replay, a 409) never waits for a write, which may itself wait for a
//     request's transaction.
//
// A database sqlitedb did not open (it has no plugin), or one in memory,
// has no connection of the store's own: writes take a connection of the
// pool in the same turns, reads one of the pool (own and reader are nil).
type writer struct {
	pool     *sql.DB
	own      ownConn
	reader   ownConn
	readTurn chan struct{}
	refs     int
	commits  int           // since the last checkpoint; under the turn
	kick     chan struct{} // to the checkpointer
	stop     context.CancelFunc
	done     chan struct{} // closed when the checkpointer has returned
}

// newWriter opens f's writer for s's pool, and starts its checkpointer.
func newWriter(s *Store, f *sqliteFile) (*writer, error) {
	w := &writer{pool: s.pool, readTurn: make(chan struct{}, 1), kick: make(chan struct{}, 1), done: make(chan struct{})}
	if opener, ok := s.db.Config.Plugins[connPlugin].(connOpener); ok && f.path != "" {
		var err error
		if w.own, err = openOwn(opener, f.path, "PRAGMA wal_autocheckpoint = 0"); err == nil {
			if w.reader, err = openOwn(opener, f.path); err != nil {
				_ = w.own.Close()
			}
		}
		if err != nil {
			return nil, fmt.Errorf("gormstore: open the store's connections to %q: %w", f.path, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.stop = cancel
	go w.checkpointer(ctx, s.pool)
	return w, nil
}

// openOwn opens an ownConn to path and runs setup there.
func openOwn(opener connOpener, path string, setup ...string) (ownConn, error) {
	c, err := opener.OpenConn(path)
	if err != nil {
		return nil, err
	}
	own, ok := c.(ownConn)
	if !ok {
		return nil, fmt.Errorf("sqlitedb gave a %T, not a connection the store can use", c)
	}
	for _, stmt := range setup {
		if _, err := own.Exec(stmt); err != nil {
			_ = own.Close()
			return nil, err
		}
	}
	return own, nil
}

// close stops the checkpointer and closes the connections.
func (w *writer) close() {
	w.stop()
	<-w.done
	for _, c := range []ownConn{w.own, w.reader} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// committed counts a commit of the writer, and has the checkpointer run
// every checkpointEvery commits. The caller holds the turn.
func (w *writer) committed() {
	if w.commits++; w.commits < checkpointEvery {
		return
	}
	w.commits = 0
	select {
	case w.kick <- struct{}{}:
	default: // a checkpoint is due already
	}
}

// checkpointer copies the pages of the write-ahead log into the database
// file whenever the writer asks, without waiting for anyone (PASSIVE), on
// a connection of the pool: left to SQLite, the commit that takes the log
// past 1000 pages does it, and a request waits for it (and for the sync
// of the database file).
func (w *writer) checkpointer(ctx context.Context, pool *sql.DB) {
	defer close(w.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		// A failure is retried at the next kick; SQLite checkpoints in a
		// commit if the log outgrows 1000 pages meanwhile. Only the wait
		// for a connection follows ctx: the statement gets no context
		// that can end (see runSQLite), and Close waits for it.
		if conn, err := pool.Conn(ctx); err == nil {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA wal_checkpoint(PASSIVE)")
			_ = conn.Close()
		}
	}
}

// write runs fn, one write of s, on its writer in the file's turn, and
// waits for the turn and for SQLite's write lock no longer than ctx lasts.
// fn's statements never get a cancellable context (see runSQLite).
func (s *Store) write(ctx context.Context, fn func(x session) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l := s.local
	if err := takeTurn(ctx, l.file.turn); err != nil {
		return err
	}
	defer func() { <-l.file.turn }()
	if err := ctx.Err(); err != nil {
		return err
	}
	w := l.writer
	var err error
	if w.own == nil {
		err = s.runSQLite(ctx, fn)
	} else {
		x := session{ctx: context.WithoutCancel(ctx), own: w.own, hook: s.onStatement}
		err = s.waitBusy(ctx, x, func(ms int64) error { return w.own.SetBusyTimeout(int(ms)) }, 0, writerBudget, fn)
	}
	if err == nil {
		w.committed()
	}
	return err
}

// read runs fn, reads only: on the writer if no write is under way,
// otherwise on the writer's reader, in turns of its own, so that a read
// never waits for a write (which may wait for a request's transaction). A
// read on SQLite never waits for the write lock (WAL), so only the wait for
// the reader's turn, or for a connection of the pool, follows ctx; the
// statements get no context that can end (see runSQLite).
func (s *Store) read(ctx context.Context, fn func(x session) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l := s.local
	w := l.writer
	switch {
	case w.reader != nil:
		select {
		case l.file.turn <- struct{}{}:
			// No write under way: the writer's page cache holds what the
			// last writes touched, where the reader's was emptied by them
			// (SQLite empties a connection's cache whenever another wrote).
			defer func() { <-l.file.turn }()
			return fn(session{ctx: context.WithoutCancel(ctx), own: w.own, hook: s.onStatement})
		default:
		}
		if !take(ctx, w.readTurn) {
			return fmt.Errorf("%w (waiting for the other reads of the process)", ctx.Err())
		}
		defer func() { <-w.readTurn }()
		return fn(session{ctx: context.WithoutCancel(ctx), own: w.reader, hook: s.onStatement})
	case ctx.Done() == nil:
		return fn(s.session(ctx, s.pool))
	}
	return s.onConn(ctx, func(quiet context.Context, conn *sql.Conn) error { return fn(s.session(quiet, conn)) })
}

// takeTurn takes the file's write turn, waiting no longer than ctx lasts
// nor, if ctx sets no deadline, than writerBudget: a request's transaction
// holds the turn from its BEGIN to its COMMIT (see Tx), and with it
// SQLite's write lock, for which a connection would wait that long.
func takeTurn(ctx context.Context, turn chan struct{}) error {
	select {
	case turn <- struct{}{}:
		return nil
	default:
	}
	var budget <-chan time.Time
	if _, ok := ctx.Deadline(); !ok {
		t := time.NewTimer(writerBudget)
		defer t.Stop()
		budget = t.C
	}
	select {
	case turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w (waiting for the other writes of the process)", ctx.Err())
	case <-budget:
		return fmt.Errorf("gormstore: the other writes of the process held SQLite's file for %s", writerBudget)
	}
}

// take takes turn's slot, or gives up when ctx ends first.
func take(ctx context.Context, turn chan struct{}) bool {
	select {
	case turn <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}
