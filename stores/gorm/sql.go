package gormstore

import (
	"fmt"
	"strconv"
	"strings"

	"gorm.io/gorm"
)

// dialect is one of the databases the store writes SQL for.
type dialect uint8

const (
	dialectSQLite dialect = iota + 1
	dialectPostgres
	dialectMySQL
)

func dialectOf(db *gorm.DB) (dialect, error) {
	switch name := db.Dialector.Name(); name {
	case "sqlite":
		return dialectSQLite, nil
	case "postgres":
		return dialectPostgres, nil
	case "mysql":
		return dialectMySQL, nil
	default:
		return 0, fmt.Errorf("gormstore: unsupported dialect %q (supported: sqlite, postgres, mysql)", name)
	}
}

// Column names avoid every reserved word of every dialect, and are quoted
// all the same. A record is keyed by the SHA-256 of its scope and of its
// key (see hashID), never by the values themselves.
const (
	colScope       = "scope_hash"
	colKey         = "key_hash"
	colFingerprint = "fingerprint"
	colState       = "idem_state"
	colToken       = "owner_token"
	colLeaseUntil  = "lease_until"
	colCreatedAt   = "created_at"
	colCompletedAt = "completed_at"
	colExpiresAt   = "expires_at"
	colStatus      = "resp_status"
	colHeaders     = "resp_headers"
	colBody        = "resp_body"
)

// State values as stored: the same numbers as idem.State.
const (
	stateInFlight  = "1"
	stateCompleted = "2"
)

// statements holds every SQL statement of a store, rendered once for its
// dialect and table. Placeholders are "?": GORM turns them into the
// dialect's bind variables.
type statements struct {
	insert          string // conflict handling per dialect, see Store.Acquire
	replaceExpired  string
	takeOverLapsed  string
	selectRecord    string
	renew           string
	checkOwner      string
	complete        string
	release         string
	purge           string
	createTable     []string
	quotedTableName string
	// checkSchema reads the key columns of no row: it fails on a table
	// created by an earlier version of the store.
	checkSchema string
	// SQLite: insertCompleted writes a completed record, and completeRow
	// too, replacing a row that nobody holds (see Store.completeLocal),
	// with one placeholder more; dropExpired deletes a
	// record expired at its placeholders' time; freeInFlight deletes the
	// records in flight a dead process left; tableExists counts the tables
	// named as its argument in the table's schema.
	insertCompleted, completeRow, dropExpired, freeInFlight, tableExists string
	// A batch renewal is head, then held once per lock joined by OR, then
	// tail (see Store.RenewBatch). renewBatch updates and, but on MySQL,
	// returns the rows it renewed; lockBatch (MySQL) reads and locks them.
	held                           string
	renewBatchHead, renewBatchTail string
	lockBatchHead, lockBatchTail   string
	// On MySQL the purge reads the expired records (purgeFind), then
	// deletes those: purgeHead, then byKey once per record joined by OR,
	// then ")" (see Store.purgeMySQL).
	purgeFind, purgeHead, byKey string

	// native holds the statements of the hot path with the dialect's own
	// placeholders, for database/sql (see session).
	native hotStatements
}

// hotStatements are the statements a request's store calls run.
type hotStatements struct {
	insert, replaceExpired, takeOverLapsed, selectRecord    string
	renew, checkOwner, complete, release, purge             string
	insertCompleted, completeRow, dropExpired, freeInFlight string
}

// nativePlaceholders renders stmt's "?" placeholders as the dialect's own:
// PostgreSQL numbers them ($1, $2, ...); SQLite and MySQL take "?". The
// store's statements hold no string literal, and quoted identifiers are
// letters, digits and underscores (checkTableName), so every "?" is a
// placeholder.
func nativePlaceholders(d dialect, stmt string) string {
	if d != dialectPostgres {
		return stmt
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(stmt); i++ {
		if stmt[i] != '?' {
			b.WriteByte(stmt[i])
			continue
		}
		n++
		b.WriteString("$" + strconv.Itoa(n))
	}
	return b.String()
}

// sqlWriter builds SQL with identifiers quoted by the GORM dialector, the
// same quoting GORM applies to its own statements.
type sqlWriter struct {
	strings.Builder
	db *gorm.DB
}

// id writes a quoted identifier; "schema.table" is quoted part by part.
func (w *sqlWriter) id(name string) *sqlWriter {
	w.db.Dialector.QuoteTo(w, name)
	return w
}

// s writes raw SQL.
func (w *sqlWriter) s(sql string) *sqlWriter {
	w.WriteString(sql)
	return w
}

// ids writes a comma-separated list of quoted identifiers.
func (w *sqlWriter) ids(names ...string) *sqlWriter {
	for i, n := range names {
		if i > 0 {
			w.s(", ")
		}
		w.id(n)
	}
	return w
}

func (w *sqlWriter) done() string {
	s := w.String()
	w.Reset()
	return s
}

// selectColumns are the columns readRecord scans, in its order.
var selectColumns = []string{colFingerprint, colState, colToken, colLeaseUntil, colCreatedAt,
	colCompletedAt, colExpiresAt, colStatus, colHeaders, colBody}

func buildStatements(db *gorm.DB, d dialect, table string) statements {
	w := &sqlWriter{db: db}
	var st statements
	st.quotedTableName = w.id(table).done()
	t := st.quotedTableName
	byID := func() *sqlWriter {
		return w.s(" WHERE ").id(colScope).s(" = ? AND ").id(colKey).s(" = ?")
	}
	owned := func() *sqlWriter {
		return byID().s(" AND ").id(colToken).s(" = ? AND ").id(colState).s(" = " + stateInFlight)
	}
	// expiredBy is idem.Record.Expired: both placeholders take the same
	// now. With unindexed, expires_at is hidden from the planner ("+ 0"),
	// so that a statement cannot go by the expiry index.
	expiredBy := func(unindexed bool) *sqlWriter {
		if unindexed {
			w.s("(").id(colExpiresAt).s(" + 0)")
		} else {
			w.id(colExpiresAt)
		}
		return w.s(" <= ? AND (").id(colState).s(" = " + stateCompleted + " OR ").
			id(colLeaseUntil).s(" <= ?)")
	}
	expiredAt := func() *sqlWriter { return expiredBy(false) }

	w.s("INSERT INTO "+t+" (").
		ids(colScope, colKey, colFingerprint, colState, colToken, colLeaseUntil, colCreatedAt,
			colCompletedAt, colExpiresAt, colStatus, colHeaders, colBody).
		s(") VALUES (?, ?, ?, " + stateInFlight + ", ?, ?, ?, NULL, ?, 0, NULL, NULL)")
	if d != dialectMySQL {
		w.s(" ON CONFLICT (").ids(colScope, colKey).s(") DO NOTHING")
	}
	st.insert = w.done()

	if d == dialectSQLite {
		// A completed record, whose holder lives in memory. A row there
		// is one nobody holds, replaced: a record in flight a dead process
		// left, or one expired when the key was taken (the last
		// placeholder: its holder's acquisition). Any other row, live,
		// stays (the statement then changes nothing).
		w.s("INSERT INTO "+t+" (").
			ids(colStatus, colHeaders, colBody, colCompletedAt, colExpiresAt, colScope, colKey, colToken,
				colFingerprint, colLeaseUntil, colCreatedAt, colState).
			s(") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, " + stateCompleted + ")")
		st.insertCompleted = w.String()
		w.s(" ON CONFLICT (").ids(colScope, colKey).s(") DO UPDATE SET ")
		for i, c := range []string{colStatus, colHeaders, colBody, colCompletedAt, colExpiresAt, colToken,
			colFingerprint, colLeaseUntil, colCreatedAt, colState} {
			if i > 0 {
				w.s(", ")
			}
			w.id(c).s(" = excluded.").id(c)
		}
		w.s(" WHERE ").id(colState).s(" = " + stateInFlight + " OR ").id(colExpiresAt).s(" <= ?")
		st.completeRow = w.done()
		w.s("DELETE FROM " + t)
		byID().s(" AND ")
		expiredAt()
		st.dropExpired = w.done()
		w.s("DELETE FROM " + t + " WHERE ").id(colState).s(" = " + stateInFlight)
		st.freeInFlight = w.done()
		schema, _, qualified := strings.Cut(table, ".")
		if qualified {
			w.id(schema).s(".")
		}
		w.s("sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE")
		st.tableExists = "SELECT count(*) FROM " + w.done()
	}

	// An expired record is replaced whole: to its new holder it is new.
	w.s("UPDATE " + t + " SET ").
		id(colFingerprint).s(" = ?, ").id(colState).s(" = " + stateInFlight + ", ").
		id(colToken).s(" = ?, ").id(colLeaseUntil).s(" = ?, ").id(colCreatedAt).s(" = ?, ").
		id(colCompletedAt).s(" = NULL, ").id(colExpiresAt).s(" = ?, ").id(colStatus).s(" = 0, ").
		id(colHeaders).s(" = NULL, ").id(colBody).s(" = NULL")
	byID().s(" AND ")
	expiredAt()
	st.replaceExpired = w.done()

	// A lapsed lease goes to a request with the same fingerprint only, and
	// only while the record has not expired (then it is replaced instead).
	w.s("UPDATE " + t + " SET ").
		id(colToken).s(" = ?, ").id(colLeaseUntil).s(" = ?, ").id(colCreatedAt).s(" = ?, ").
		id(colExpiresAt).s(" = ?")
	byID().s(" AND ").id(colState).s(" = " + stateInFlight + " AND ").id(colLeaseUntil).s(" <= ? AND ").
		id(colExpiresAt).s(" > ? AND ").id(colFingerprint).s(" = ?")
	st.takeOverLapsed = w.done()

	w.s("SELECT ").ids(selectColumns...).s(" FROM " + t)
	byID()
	st.selectRecord = w.done()

	greatest := "GREATEST("
	if d == dialectSQLite {
		greatest = "MAX("
	}
	w.s("UPDATE " + t + " SET ").id(colLeaseUntil).s(" = " + greatest).id(colLeaseUntil).s(", ?)")
	owned()
	st.renew = w.done()

	w.s("SELECT 1 FROM " + t)
	owned()
	st.checkOwner = w.done()

	w.s("UPDATE " + t + " SET ").id(colState).s(" = " + stateCompleted + ", ").
		id(colStatus).s(" = ?, ").id(colHeaders).s(" = ?, ").id(colBody).s(" = ?, ").
		id(colCompletedAt).s(" = ?, ").id(colExpiresAt).s(" = ?")
	owned()
	st.complete = w.done()

	w.s("DELETE FROM " + t)
	owned()
	st.release = w.done()

	w.s("SELECT ").ids(colScope, colKey).s(" FROM " + t + " WHERE 1 = 0")
	st.checkSchema = w.done()

	w.s("(").id(colScope).s(" = ? AND ").id(colKey).s(" = ? AND ").id(colToken).s(" = ?)")
	st.held = w.done()
	inFlightAnd := func() *sqlWriter { return w.s(" WHERE ").id(colState).s(" = " + stateInFlight + " AND (") }
	w.s("UPDATE " + t + " SET ").id(colLeaseUntil).s(" = " + greatest).id(colLeaseUntil).s(", ?)")
	st.renewBatchHead = inFlightAnd().done()
	w.s(")")
	if d != dialectMySQL {
		w.s(" RETURNING ").ids(colScope, colKey, colToken)
	}
	st.renewBatchTail = w.done()
	if d == dialectMySQL {
		w.s("SELECT ").ids(colScope, colKey, colToken).s(" FROM " + t)
		st.lockBatchHead = inFlightAnd().done()
		st.lockBatchTail = ") FOR UPDATE"
	}

	switch d {
	case dialectPostgres:
		// SKIP LOCKED: rows a request is updating right now wait for the
		// next batch instead of holding up the purge, or the purge them.
		w.s("DELETE FROM "+t+" WHERE (").ids(colScope, colKey).s(") IN (SELECT ").
			ids(colScope, colKey).s(" FROM " + t + " WHERE ")
		expiredAt().s(" LIMIT ? FOR UPDATE SKIP LOCKED)")
	case dialectMySQL:
		// MySQL refuses LIMIT in an IN subquery on the same table, and a
		// DELETE ... ORDER BY ... LIMIT locks every row it reads: the
		// purge reads first, then deletes what it read (Store.purgeMySQL).
		w.s("SELECT ").ids(colScope, colKey).s(" FROM " + t + " WHERE ")
		expiredAt().s(" ORDER BY ").id(colExpiresAt).s(" LIMIT ?")
		st.purgeFind = w.done()
		// The expiry index stays out of the DELETE's plan: going by it (the
		// optimizer did, for batches of tens of rows), the DELETE would
		// lock rows in expiry order again.
		w.s("DELETE FROM " + t + " WHERE ")
		expiredBy(true).s(" AND (")
		st.purgeHead = w.done()
		w.s("(").id(colScope).s(" = ? AND ").id(colKey).s(" = ?)")
		st.byKey = w.done()
		// Purge runs purgeFind; purge stays empty.
	default:
		w.s("DELETE FROM " + t + " WHERE rowid IN (SELECT rowid FROM " + t + " WHERE ")
		expiredAt().s(" LIMIT ?)")
	}
	st.purge = w.done()

	st.createTable = schemaSQL(w, d, table)

	st.native = hotStatements{
		insert:          nativePlaceholders(d, st.insert),
		replaceExpired:  nativePlaceholders(d, st.replaceExpired),
		takeOverLapsed:  nativePlaceholders(d, st.takeOverLapsed),
		selectRecord:    nativePlaceholders(d, st.selectRecord),
		renew:           nativePlaceholders(d, st.renew),
		checkOwner:      nativePlaceholders(d, st.checkOwner),
		complete:        nativePlaceholders(d, st.complete),
		release:         nativePlaceholders(d, st.release),
		purge:           nativePlaceholders(d, st.purge),
		insertCompleted: st.insertCompleted, // SQLite's placeholders are "?"
		completeRow:     st.completeRow,
		dropExpired:     st.dropExpired,
		freeInFlight:    st.freeInFlight,
	}
	return st
}

// schemaSQL renders the CREATE statements for the dialect.
func schemaSQL(w *sqlWriter, d dialect, table string) []string {
	schema, name, qualified := strings.Cut(table, ".")
	if !qualified {
		schema, name = "", table
	}
	index := name + "_expires_at_idx"
	type column struct{ name, sqlite, postgres, mysql string }
	// Times are BIGINT Unix nanoseconds everywhere: exact, and compared the
	// same way on every dialect.
	columns := []column{
		{colScope, "BLOB NOT NULL", "bytea NOT NULL", "binary(32) NOT NULL"},
		{colKey, "BLOB NOT NULL", "bytea NOT NULL", "binary(32) NOT NULL"},
		{colFingerprint, "BLOB NOT NULL", "bytea NOT NULL", "binary(32) NOT NULL"},
		{colState, "INTEGER NOT NULL", "smallint NOT NULL", "tinyint NOT NULL"},
		{colToken, "TEXT NOT NULL", "text NOT NULL", "varbinary(255) NOT NULL"},
		{colLeaseUntil, "INTEGER NOT NULL", "bigint NOT NULL", "bigint NOT NULL"},
		{colCreatedAt, "INTEGER NOT NULL", "bigint NOT NULL", "bigint NOT NULL"},
		{colCompletedAt, "INTEGER", "bigint", "bigint NULL"},
		{colExpiresAt, "INTEGER NOT NULL", "bigint NOT NULL", "bigint NOT NULL"},
		{colStatus, "INTEGER NOT NULL", "integer NOT NULL", "smallint NOT NULL"},
		{colHeaders, "BLOB", "bytea", "mediumblob NULL"},
		{colBody, "BLOB", "bytea", "longblob NULL"},
	}
	w.s("CREATE TABLE IF NOT EXISTS ").id(table).s(" (\n")
	for _, c := range columns {
		typ := c.sqlite
		switch d {
		case dialectPostgres:
			typ = c.postgres
		case dialectMySQL:
			typ = c.mysql
		}
		w.s("  ").id(c.name).s(" " + typ + ",\n")
	}
	w.s("  PRIMARY KEY (").ids(colScope, colKey).s(")")
	if d == dialectMySQL {
		// MySQL has no CREATE INDEX IF NOT EXISTS.
		w.s(",\n  KEY ").id(index).s(" (").id(colExpiresAt).s(")\n) ENGINE=InnoDB")
		return []string{w.done()}
	}
	w.s("\n)")
	create := w.done()
	w.s("CREATE INDEX IF NOT EXISTS ")
	if d == dialectSQLite && schema != "" {
		// SQLite names the schema on the index, never on its table.
		w.id(schema + "." + index).s(" ON ").id(name)
	} else {
		w.id(index).s(" ON ").id(table)
	}
	w.s(" (").id(colExpiresAt).s(")")
	return []string{create, w.done()}
}
