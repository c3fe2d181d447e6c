// Package testdb gives tests a PostgreSQL database of their own on the
// server `make test` starts, for the tests that run the demo's simulated
// payment provider: it settles every charge of the database it runs on, and
// must not settle those of the tests sharing the server's test database.
package testdb

import (
	"context"
	"crypto/rand"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/internal/testservers"
	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit/demo/payments/internal/payments"
)

// Postgres creates an empty database on the server of
// IDEMKIT_TEST_POSTGRES_DSN, dropped when tb ends, and returns its DSN.
// Without the variable it fails tb, or returns "" under -short.
func Postgres(tb testing.TB) string {
	tb.Helper()
	dsn := testservers.Optional(tb, testservers.PostgresDSN)
	if dsn == "" {
		return "" // -short
	}
	server, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		tb.Fatal(err)
	}
	name := "payments_" + strings.ToLower(rand.Text()[:12])
	if err := server.Exec("CREATE DATABASE " + name).Error; err != nil {
		tb.Fatalf("create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		server.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
		if sqlDB, err := server.DB(); err == nil {
			sqlDB.Close()
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// Ledger opens a new SQLite ledger in tb's temporary directory, migrated,
// closed when tb ends.
func Ledger(tb testing.TB) *gorm.DB {
	tb.Helper()
	db, err := sqlitedb.Open(filepath.Join(tb.TempDir(), "p.db"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	if err := payments.Migrate(context.Background(), db); err != nil {
		tb.Fatal(err)
	}
	return db
}
