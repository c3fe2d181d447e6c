package api

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// sqlStateError stands for a PostgreSQL error (pgconn.PgError), which
// reports its SQLSTATE by this method.
type sqlStateError string

func (e sqlStateError) Error() string    { return "ERROR: (SQLSTATE " + string(e) + ")" }
func (e sqlStateError) SQLState() string { return string(e) }

// sqliteError stands for the SQLite driver's errors, which carry their
// result code.
type sqliteError int

func (e sqliteError) Error() string { return fmt.Sprintf("sqlite error %d", int(e)) }
func (e sqliteError) Code() int     { return int(e) }

func TestTransientDBError(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"bad connection, wrapped", fmt.Errorf("begin: %w", driver.ErrBadConn), true},
		{"mysql invalid connection", mysql.ErrInvalidConn, true},
		{"postgres connection failure", sqlStateError("08006"), true},
		{"postgres too many connections", sqlStateError("53300"), true},
		{"postgres shutting down", sqlStateError("57P01"), true},
		{"postgres serialization failure", sqlStateError("40001"), true},
		{"postgres undefined table", sqlStateError("42P01"), false},
		{"postgres unique violation", sqlStateError("23505"), false},
		{"mysql deadlock", &mysql.MySQLError{Number: 1213}, true},
		{"mysql lock wait timeout", &mysql.MySQLError{Number: 1205}, true},
		{"mysql no such table", &mysql.MySQLError{Number: 1146, SQLState: [5]byte{'4', '2', 'S', '0', '2'}}, false},
		{"sqlite busy", sqliteError(5), true},
		{"sqlite busy snapshot", sqliteError(5 | 2<<8), true},
		{"sqlite no such table", sqliteError(1), false},
		{"anything else", errors.New("boom"), false},
	} {
		if got := transientDBError(c.err); got != c.want {
			t.Errorf("%s: transientDBError(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
