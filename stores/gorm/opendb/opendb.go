// Package opendb opens the database a DSN names, for gormstore: a SQLite
// file path (through sqlitedb); PostgreSQL by a postgres:// or
// postgresql:// URL or its key=value form (host=db user=app dbname=p);
// MySQL or MariaDB by a mysql:// URL or the Go MySQL driver's own form
// (user:pass@tcp(host:3306)/db). The demo's -db flag and idemctl's -store
// take the same strings through it. Label names a DSN without its
// password, and no error of this package quotes one.
//
// It links the SQLite engine and both server drivers: a program that uses
// one database should open it itself.
package opendb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/idemkit/idemkit/internal/redact"
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

// goMySQLForm matches the Go MySQL driver's DSN: [user[:password]]@net(address)/...
var goMySQLForm = regexp.MustCompile(`^[^:@/]*(:.*)?@(tcp|tcp4|tcp6|unix)\([^)]*\)/`)

// keyValueForm matches PostgreSQL's key=value DSN: settings only, one of
// them the host or the database.
var (
	keyValueForm  = regexp.MustCompile(`^\s*([A-Za-z_]+\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)\s*)+$`)
	keyValueNamed = regexp.MustCompile(`(^|\s)(host|hostaddr|dbname)\s*=`)
)

// KindOf returns what dsn names, or an error for a URL of another scheme.
func KindOf(dsn string) (Kind, error) {
	k := kindOf(dsn)
	if k == 0 {
		return 0, fmt.Errorf("unsupported database %s: use a SQLite file path, postgres:// or mysql://", Label(dsn))
	}
	return k, nil
}

// kindOf is KindOf, 0 for a URL of another scheme.
func kindOf(dsn string) Kind {
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return PostgreSQL
	case strings.HasPrefix(dsn, "mysql://"):
		return MySQL
	case strings.Contains(dsn, "://"):
		return 0
	case goMySQLForm.MatchString(dsn):
		return MySQL
	case keyValueForm.MatchString(dsn) && keyValueNamed.MatchString(dsn):
		return PostgreSQL
	}
	return SQLite
}

// Open opens the database dsn names, creating a SQLite file if need be
// (sqlitedb.Open). opts go to gorm.Open.
func Open(dsn string, opts ...gorm.Option) (*gorm.DB, error) {
	return open(context.Background(), dsn, sqlitedb.Open, opts)
}

// OpenContext is Open within ctx: a database server that does not answer
// (a listener that accepts and never replies, a stopped process) makes it
// fail when ctx ends, not when the operating system gives up.
func OpenContext(ctx context.Context, dsn string, opts ...gorm.Option) (*gorm.DB, error) {
	return open(ctx, dsn, sqlitedb.Open, opts)
}

// OpenReadOnly is OpenContext, but a SQLite file must exist and is opened
// for reading only (sqlitedb.OpenReadOnly). A database server is opened as
// by Open: the statements run on it decide what is written.
func OpenReadOnly(ctx context.Context, dsn string, opts ...gorm.Option) (*gorm.DB, error) {
	return open(ctx, dsn, sqlitedb.OpenReadOnly, opts)
}

func open(ctx context.Context, dsn string, sqlite func(string, ...gorm.Option) (*gorm.DB, error), opts []gorm.Option) (*gorm.DB, error) {
	kind, err := KindOf(dsn)
	if err != nil {
		return nil, err
	}
	switch kind {
	case PostgreSQL:
		sqlDB, err := connect(ctx, "pgx", dsn)
		if err != nil {
			return nil, err
		}
		return gormOn(sqlDB, postgres.New(postgres.Config{Conn: sqlDB}), opts)
	case MySQL:
		goDSN, err := MySQLDSN(dsn)
		if err != nil {
			return nil, err
		}
		sqlDB, err := connect(ctx, "mysql", goDSN)
		if err != nil {
			return nil, err
		}
		return gormOn(sqlDB, mysql.New(mysql.Config{Conn: sqlDB}), opts)
	}
	return sqlite(dsn, opts...)
}

// connect opens a pool on a database server and makes its first
// connection within ctx, so that gorm.Open, whose own first queries
// (MySQL's version) take no context, finds one ready.
func connect(ctx context.Context, driver, dsn string) (*sql.DB, error) {
	sqlDB, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, err
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		sqlDB.Close()
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			err = fmt.Errorf("%w: %w", ctxErr, err)
		}
		return nil, err
	}
	return sqlDB, nil
}

// gormOn opens GORM on sqlDB, which connect pinged already.
func gormOn(sqlDB *sql.DB, d gorm.Dialector, opts []gorm.Option) (*gorm.DB, error) {
	db, err := gorm.Open(d, opts...)
	if err != nil {
		sqlDB.Close()
		return nil, err
	}
	return db, nil
}

// MySQLDSN turns mysql://user:pass@host:port/db?params into the Go MySQL
// driver's user:pass@tcp(host:port)/db?params form, with parseTime set; a
// DSN in the driver's form comes back with parseTime set.
func MySQLDSN(dsn string) (string, error) {
	if goMySQLForm.MatchString(dsn) {
		cfg, err := gomysql.ParseDSN(dsn)
		if err != nil {
			return "", fmt.Errorf("mysql DSN %s: %w", Label(dsn), err)
		}
		cfg.ParseTime = true
		return cfg.FormatDSN(), nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which it quotes whole
		}
		return "", fmt.Errorf("mysql DSN %s: %w", Label(dsn), err)
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

// Label names dsn for logs and errors, without any password
// (redact.DSN): a SQLite path as "sqlite:" and the path.
func Label(dsn string) string {
	if kindOf(dsn) == SQLite {
		return "sqlite:" + dsn
	}
	return redact.DSN(dsn)
}

// Secrets returns the passwords dsn holds, in every form an error may
// quote them (redact.Secrets): give them to redact.Scrub with any text a
// driver wrote about dsn.
func Secrets(dsn string) []string { return redact.Secrets(dsn) }
