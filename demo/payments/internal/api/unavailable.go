package api

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// pingTimeout bounds the check that the database answers at all.
const pingTimeout = time.Second

// databaseUnavailable reports whether err, met while a request ran, says
// the database could not serve it for now (a lost connection, a server
// shutting down or overloaded, a lock not granted in time, a deadlock
// victim) rather than that the request or the code is wrong: the request
// then gets 503 with Retry-After, and its retry with the same key may
// succeed. An error it does not recognise counts too if the database does
// not answer a ping at once, whatever the driver said.
func (a *API) databaseUnavailable(ctx context.Context, err error) bool {
	if transientDBError(err) {
		return true
	}
	sqlDB, derr := a.DB.DB()
	if derr != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pingTimeout)
	defer cancel()
	return sqlDB.PingContext(ctx) != nil
}

// transientDBError recognises the errors of the three databases the demo
// runs on that a later attempt may not meet.
func transientDBError(err error) bool {
	var (
		netErr net.Error
		state  interface{ SQLState() string } // PostgreSQL (pgconn.PgError)
		myErr  *mysql.MySQLError
		sqlite interface{ Code() int }
	)
	switch {
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, mysql.ErrInvalidConn), errors.As(err, &netErr):
		return true
	case errors.As(err, &state):
		return transientSQLState(state.SQLState())
	case errors.As(err, &myErr):
		switch myErr.Number {
		case 1040, 1205, 1213, 2006, 2013: // too many connections, lock wait timeout, deadlock, gone away, lost
			return true
		}
		return transientSQLState(string(myErr.SQLState[:]))
	case errors.As(err, &sqlite):
		switch sqlite.Code() & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED: the lock was not granted in time
			return true
		}
	}
	return false
}

// transientSQLState: connection exceptions (class 08), insufficient
// resources (53), a server shutting down or starting (57P01 to 57P03),
// serialization failures and deadlocks (40001, 40P01).
func transientSQLState(s string) bool {
	switch {
	case strings.HasPrefix(s, "08"), strings.HasPrefix(s, "53"):
		return true
	}
	switch s {
	case "57P01", "57P02", "57P03", "40001", "40P01":
		return true
	}
	return false
}
