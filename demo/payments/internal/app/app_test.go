package app

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testservers"
)

func TestDBLabelHidesPassword(t *testing.T) {
	for db, want := range map[string]string{
		"payments.db": "sqlite:payments.db",
		"postgres://app:s3cret@127.0.0.1:5432/payments": "postgres://app@127.0.0.1:5432/payments",
	} {
		if got := (Config{DB: db}).DBLabel(); got != want {
			t.Errorf("DBLabel(%q) = %q, want %q", db, got, want)
		}
	}
}

func TestEnvName(t *testing.T) {
	if got := EnvName("provider-failure-rate"); got != "PAYMENTS_PROVIDER_FAILURE_RATE" {
		t.Fatalf("EnvName = %q", got)
	}
}

// TestServerPoolSized: on a database server the demo keeps a bounded pool
// with as many idle connections as open ones, so a busy server neither
// dials a connection per request nor takes every slot of the database.
func TestServerPoolSized(t *testing.T) {
	pg := testservers.Require(t, testservers.PostgresDSN)
	// The MariaDB DSN is in the Go driver's form; the demo takes a URL.
	my := testservers.MySQLURL(t, testservers.Require(t, testservers.MySQLDSN))
	for name, dsn := range map[string]string{"postgres": pg, "mysql": my} {
		t.Run(name, func(t *testing.T) {
			db, err := openDB(dsn)
			if err != nil {
				t.Fatal(err)
			}
			sqlDB, err := db.DB()
			if err != nil {
				t.Fatal(err)
			}
			defer sqlDB.Close()
			// Hold every connection the pool allows, give them back, and
			// count how many stay open for the next burst.
			var conns []*sql.Conn
			for range ServerConns {
				c, err := sqlDB.Conn(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, c)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			if c, err := sqlDB.Conn(ctx); err == nil {
				c.Close()
				t.Fatalf("the pool opened connection %d, past its bound", ServerConns+1)
			}
			for _, c := range conns {
				c.Close()
			}
			if idle := sqlDB.Stats().Idle; idle != ServerConns {
				t.Fatalf("%d idle connections kept after a burst, want %d", idle, ServerConns)
			}
		})
	}
}
