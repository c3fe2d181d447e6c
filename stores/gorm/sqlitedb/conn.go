package sqlitedb

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"unsafe"

	"gorm.io/gorm"
	"modernc.org/libc"
	"modernc.org/libc/sys/types"
	sqlite3 "modernc.org/sqlite/lib"
)

// conn is a connection of its own to an SQLite file, past database/sql and
// its driver, for gormstore's writer: it prepares each statement once and
// keeps it, where the driver compiles a statement again on every call
// (even one prepared through database/sql), and it sets its busy timeout
// with a function call rather than a statement. It is not safe for
// concurrent use: gormstore's writer takes turns.
//
// It runs on the same SQLite engine as the pool (modernc.org/sqlite, under
// the driver), so the engine's locks tell its connections and the pool's
// apart as connections of one process.
type conn struct {
	tls   *libc.TLS
	db    uintptr
	stmts map[string]uintptr // prepared, by their SQL
	// allocs are the C copies of the arguments bound to the statement
	// that runs, freed once it has run.
	allocs []uintptr
}

// openConn opens the SQLite file at path, which exists, with the settings
// Open gives its pool but the busy timeout (0: the caller sets it).
func openConn(path string) (*conn, error) {
	c := &conn{tls: libc.NewTLS(), stmts: map[string]uintptr{}}
	name, err := libc.CString(path)
	if err != nil {
		c.tls.Close()
		return nil, err
	}
	defer libc.Xfree(c.tls, name)
	pdb := c.tls.Alloc(int(unsafe.Sizeof(uintptr(0))))
	defer c.tls.Free(int(unsafe.Sizeof(uintptr(0))))
	// No mutex of SQLite's guards the connection: its user takes turns.
	rc := sqlite3.Xsqlite3_open_v2(c.tls, name, pdb, sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_NOMUTEX, 0)
	c.db = readPtr(pdb)
	if rc != sqlite3.SQLITE_OK {
		err := c.error(rc)
		c.Close()
		return nil, openError(path, false, err)
	}
	sqlite3.Xsqlite3_extended_result_codes(c.tls, c.db, 1)
	for _, p := range []string{"PRAGMA journal_mode = WAL", "PRAGMA synchronous = NORMAL"} {
		if err := c.run(p); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// Error is an error of SQLite's, with its extended result code.
type Error struct {
	code int
	msg  string
}

func (e *Error) Error() string { return e.msg }

// Code returns SQLite's extended result code.
func (e *Error) Code() int { return e.code }

func (c *conn) error(rc int32) error {
	msg := libc.GoString(sqlite3.Xsqlite3_errstr(c.tls, rc))
	if c.db != 0 {
		rc = sqlite3.Xsqlite3_extended_errcode(c.tls, c.db)
		if m := libc.GoString(sqlite3.Xsqlite3_errmsg(c.tls, c.db)); m != msg {
			msg += ": " + m
		}
	}
	return &Error{code: int(rc), msg: fmt.Sprintf("%s (%d)", msg, rc)}
}

// run runs a statement that returns no row, without keeping it.
func (c *conn) run(query string) error {
	z, err := libc.CString(query)
	if err != nil {
		return err
	}
	defer libc.Xfree(c.tls, z)
	if rc := sqlite3.Xsqlite3_exec(c.tls, c.db, z, 0, 0, 0); rc != sqlite3.SQLITE_OK {
		return c.error(rc)
	}
	return nil
}

// SetBusyTimeout sets how long a statement waits for another connection's
// lock, in milliseconds.
func (c *conn) SetBusyTimeout(ms int) error {
	if rc := sqlite3.Xsqlite3_busy_timeout(c.tls, c.db, int32(ms)); rc != sqlite3.SQLITE_OK {
		return c.error(rc)
	}
	return nil
}

// stmt returns query's prepared statement, preparing it the first time. A
// statement that fails to prepare (its table does not exist yet) is
// prepared again next time.
func (c *conn) stmt(query string) (uintptr, error) {
	if s, ok := c.stmts[query]; ok {
		return s, nil
	}
	z, err := libc.CString(query)
	if err != nil {
		return 0, err
	}
	defer libc.Xfree(c.tls, z)
	ps := c.tls.Alloc(int(unsafe.Sizeof(uintptr(0))))
	defer c.tls.Free(int(unsafe.Sizeof(uintptr(0))))
	rc := sqlite3.Xsqlite3_prepare_v3(c.tls, c.db, z, -1, sqlite3.SQLITE_PREPARE_PERSISTENT, ps, 0)
	if rc != sqlite3.SQLITE_OK {
		return 0, c.error(rc)
	}
	s := readPtr(ps)
	if s == 0 {
		return 0, errors.New("sqlitedb: no statement in " + query)
	}
	c.stmts[query] = s
	return s, nil
}

// bind binds args to s's parameters, in order.
func (c *conn) bind(s uintptr, args []any) error {
	if n := int(sqlite3.Xsqlite3_bind_parameter_count(c.tls, s)); n != len(args) {
		return fmt.Errorf("sqlitedb: %d arguments for %d parameters", len(args), n)
	}
	for i, a := range args {
		if v, ok := a.(driver.Valuer); ok {
			var err error
			if a, err = v.Value(); err != nil {
				return err
			}
		}
		p := int32(i + 1)
		var rc int32
		switch v := a.(type) {
		case nil:
			rc = sqlite3.Xsqlite3_bind_null(c.tls, s, p)
		case int:
			rc = sqlite3.Xsqlite3_bind_int64(c.tls, s, p, int64(v))
		case int64:
			rc = sqlite3.Xsqlite3_bind_int64(c.tls, s, p, v)
		case []byte:
			switch {
			case v == nil:
				rc = sqlite3.Xsqlite3_bind_null(c.tls, s, p)
			case len(v) == 0:
				rc = sqlite3.Xsqlite3_bind_zeroblob(c.tls, s, p, 0)
			default:
				z, err := c.copy(v)
				if err != nil {
					return err
				}
				rc = sqlite3.Xsqlite3_bind_blob(c.tls, s, p, z, int32(len(v)), 0)
			}
		case string:
			z, err := c.copy([]byte(v))
			if err != nil {
				return err
			}
			rc = sqlite3.Xsqlite3_bind_text(c.tls, s, p, z, int32(len(v)), 0)
		default:
			return fmt.Errorf("sqlitedb: cannot bind a %T", a)
		}
		if rc != sqlite3.SQLITE_OK {
			return c.error(rc)
		}
	}
	return nil
}

// copy returns a C copy of b, freed by done; SQLite reads it while the
// statement runs. Its pointer is never nil, even for an empty b: SQLite
// would bind NULL instead of an empty text.
func (c *conn) copy(b []byte) (uintptr, error) {
	z := libc.Xmalloc(c.tls, types.Size_t(max(len(b), 1)))
	if z == 0 {
		return 0, fmt.Errorf("sqlitedb: cannot allocate %d bytes", len(b))
	}
	copy(libc.GoBytes(z, len(b)), b)
	c.allocs = append(c.allocs, z)
	return z, nil
}

// done resets s for its next run and frees its arguments' copies.
func (c *conn) done(s uintptr) {
	sqlite3.Xsqlite3_reset(c.tls, s)
	sqlite3.Xsqlite3_clear_bindings(c.tls, s)
	for _, z := range c.allocs {
		libc.Xfree(c.tls, z)
	}
	c.allocs = c.allocs[:0]
}

// Exec runs query, a statement returning no row, with args, and returns the
// number of rows it changed.
func (c *conn) Exec(query string, args ...any) (int64, error) {
	s, err := c.stmt(query)
	if err != nil {
		return 0, err
	}
	defer c.done(s)
	if err := c.bind(s, args); err != nil {
		return 0, err
	}
	switch rc := sqlite3.Xsqlite3_step(c.tls, s); rc {
	case sqlite3.SQLITE_DONE, sqlite3.SQLITE_ROW:
	default:
		return 0, c.error(rc)
	}
	return int64(sqlite3.Xsqlite3_changes(c.tls, c.db)), nil
}

// QueryRow runs query with args and returns its first row, read whole,
// or sql.ErrNoRows from Scan.
func (c *conn) QueryRow(query string, args ...any) interface{ Scan(dest ...any) error } {
	r := &row{}
	s, err := c.stmt(query)
	if err != nil {
		r.err = err
		return r
	}
	defer c.done(s)
	if r.err = c.bind(s, args); r.err != nil {
		return r
	}
	switch rc := sqlite3.Xsqlite3_step(c.tls, s); rc {
	case sqlite3.SQLITE_DONE:
		r.err = sql.ErrNoRows
	case sqlite3.SQLITE_ROW:
		n := int(sqlite3.Xsqlite3_column_count(c.tls, s))
		r.cols = make([]any, n)
		for i := range n {
			r.cols[i] = c.column(s, int32(i))
		}
	default:
		r.err = c.error(rc)
	}
	return r
}

// column returns column i of s's row as a Go value: nil, int64, float64,
// []byte (a blob) or string.
func (c *conn) column(s uintptr, i int32) any {
	switch sqlite3.Xsqlite3_column_type(c.tls, s, i) {
	case sqlite3.SQLITE_NULL:
		return nil
	case sqlite3.SQLITE_INTEGER:
		return int64(sqlite3.Xsqlite3_column_int64(c.tls, s, i))
	case sqlite3.SQLITE_FLOAT:
		return float64(sqlite3.Xsqlite3_column_double(c.tls, s, i))
	case sqlite3.SQLITE_TEXT:
		p := sqlite3.Xsqlite3_column_text(c.tls, s, i)
		return string(libc.GoBytes(p, int(sqlite3.Xsqlite3_column_bytes(c.tls, s, i))))
	default:
		p := sqlite3.Xsqlite3_column_blob(c.tls, s, i)
		return append([]byte{}, libc.GoBytes(p, int(sqlite3.Xsqlite3_column_bytes(c.tls, s, i)))...)
	}
}

// readPtr reads the pointer SQLite wrote at p (C memory).
func readPtr(p uintptr) uintptr {
	b := libc.GoBytes(p, int(unsafe.Sizeof(uintptr(0))))
	return *(*uintptr)(unsafe.Pointer(&b[0]))
}

// row is a row QueryRow read.
type row struct {
	cols []any
	err  error
}

// Scan copies the row's columns into dest, as database/sql's Row.Scan
// does for the types gormstore reads: *[]byte, *string, *int, *int64,
// *sql.NullInt64 and *sql.NullString.
func (r *row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if len(dest) != len(r.cols) {
		return fmt.Errorf("sqlitedb: %d destinations for %d columns", len(dest), len(r.cols))
	}
	for i, v := range r.cols {
		if err := scanInto(dest[i], v); err != nil {
			return fmt.Errorf("sqlitedb: column %d: %w", i, err)
		}
	}
	return nil
}

func scanInto(dest, v any) error {
	switch d := dest.(type) {
	case *[]byte:
		switch v := v.(type) {
		case nil:
			*d = nil
		case []byte:
			*d = v
		case string:
			*d = []byte(v)
		default:
			return fmt.Errorf("a %T into a []byte", v)
		}
	case *string:
		switch v := v.(type) {
		case string:
			*d = v
		case []byte:
			*d = string(v)
		default:
			return fmt.Errorf("a %T into a string", v)
		}
	case *int64:
		n, ok := v.(int64)
		if !ok {
			return fmt.Errorf("a %T into an int64", v)
		}
		*d = n
	case *int:
		n, ok := v.(int64)
		if !ok {
			return fmt.Errorf("a %T into an int", v)
		}
		*d = int(n)
	case *sql.NullInt64:
		return d.Scan(v)
	case *sql.NullString:
		return d.Scan(v)
	default:
		return fmt.Errorf("cannot scan into a %T", dest)
	}
	return nil
}

// Close finalizes the statements and closes the connection.
func (c *conn) Close() error {
	for _, s := range c.stmts {
		sqlite3.Xsqlite3_finalize(c.tls, s)
	}
	c.stmts = nil
	var err error
	if c.db != 0 {
		if rc := sqlite3.Xsqlite3_close_v2(c.tls, c.db); rc != sqlite3.SQLITE_OK {
			err = c.error(rc)
		}
		c.db = 0
	}
	c.tls.Close()
	return err
}

// connPlugin is the GORM plugin Open installs on the *gorm.DB it returns,
// through which gormstore, which links no SQLite engine of its own, opens
// a conn for its writer (by the plugin's name and method, see
// gormstore's local.go).
type connPlugin struct{}

// Name implements gorm.Plugin.
func (connPlugin) Name() string { return "idemkit:sqlite-conn" }

// Initialize implements gorm.Plugin.
func (connPlugin) Initialize(*gorm.DB) error { return nil }

// OpenConn opens a conn to the SQLite file at path.
func (connPlugin) OpenConn(path string) (any, error) { return openConn(path) }
