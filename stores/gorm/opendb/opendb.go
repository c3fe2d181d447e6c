// Package opendb opens the database a DSN names, for gormstore: a SQLite
// file path (through sqlitedb), a postgres:// or postgresql:// URL, or a
// mysql:// URL (turned into the Go MySQL driver's form). The demo's -db
// flag and idemctl's -store take the same strings through it.
//
// It links the SQLite engine and both server drivers: a program that uses
// one database should open it itself.
package opendb

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// Kind is what a DSN names.
type Kind uint8

const (
	// SQLite: a file path.
	SQLite Kind = iota + 1
	// PostgreSQL: a postgres:// or postgresql:// URL.
	PostgreSQL
	// MySQL: a mysql:// URL (MySQL or MariaDB).
	MySQL
)

// KindOf returns what dsn names, or an error for a URL of another scheme.
func KindOf(dsn string) (Kind, error) {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return PostgreSQL, nil
	case strings.HasPrefix(dsn, "mysql://"):
		return MySQL, nil
	case strings.Contains(dsn, "://"):
		return 0, fmt.Errorf("unsupported database %q: use a SQLite file path, postgres:// or mysql://", Label(dsn))
	}
	return SQLite, nil
}

// Open opens the database dsn names, creating a SQLite file if need be
// (sqlitedb.Open). opts go to gorm.Open.
func Open(dsn string, opts ...gorm.Option) (*gorm.DB, error) {
	return open(dsn, sqlitedb.Open, opts)
}

// OpenReadOnly is Open, but a SQLite file must exist and is opened for
// reading only (sqlitedb.OpenReadOnly). A database server is opened as by
// Open: the statements run on it decide what is written.
func OpenReadOnly(dsn string, opts ...gorm.Option) (*gorm.DB, error) {
	return open(dsn, sqlitedb.OpenReadOnly, opts)
}

func open(dsn string, sqlite func(string, ...gorm.Option) (*gorm.DB, error), opts []gorm.Option) (*gorm.DB, error) {
	kind, err := KindOf(dsn)
	if err != nil {
		return nil, err
	}
	switch kind {
	case PostgreSQL:
		return gorm.Open(postgres.Open(dsn), opts...)
	case MySQL:
		goDSN, err := MySQLDSN(dsn)
		if err != nil {
			return nil, err
		}
		return gorm.Open(mysql.Open(goDSN), opts...)
	}
	return sqlite(dsn, opts...)
}

// MySQLDSN turns mysql://user:pass@host:port/db?params into the Go MySQL
// driver's user:pass@tcp(host:port)/db?params form, with parseTime set.
func MySQLDSN(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("mysql DSN: %w", err)
	}
	q := u.Query()
	q.Set("parseTime", "true")
	auth := ""
	if u.User != nil {
		auth = u.User.Username()
		if p, ok := u.User.Password(); ok {
			auth += ":" + p
		}
		auth += "@"
	}
	return fmt.Sprintf("%stcp(%s)/%s?%s", auth, u.Host, strings.TrimPrefix(u.Path, "/"), q.Encode()), nil
}

// Label names dsn for logs and errors, without any password: a SQLite path
// as "sqlite:" and the path.
func Label(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		if strings.Contains(dsn, "://") {
			return "(a DSN that does not parse as a URL)"
		}
		return "sqlite:" + dsn
	}
	u.User = url.User(u.User.Username())
	return u.Redacted()
}
