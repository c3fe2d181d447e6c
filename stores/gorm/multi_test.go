package gormstore

import (
	"path/filepath"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/internal/testservers"
	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
	"gorm.io/gorm"
)

// independentPools opens n connection pools to one database, as n server
// processes would.
func independentPools(t *testing.T, b backend, n int) []*gorm.DB {
	t.Helper()
	var dial func() (*gorm.DB, error)
	switch b.name {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "idem.db")
		dial = func() (*gorm.DB, error) { return sqlitedb.Open(path, quiet()) }
	case "postgres":
		dsn := testservers.Require(t, testservers.PostgresDSN)
		dial = func() (*gorm.DB, error) { return openServer(dialPostgres(dsn), 10) }
	case "mysql":
		dsn := testservers.Require(t, testservers.MySQLDSN)
		dial = func() (*gorm.DB, error) { return openServer(dialMySQL(dsn), 10) }
	}
	pools := make([]*gorm.DB, n)
	for i := range pools {
		db, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if sqlDB, err := db.DB(); err == nil {
				_ = sqlDB.Close()
			}
		})
		pools[i] = db
	}
	return pools
}

// TestMultiInstance: three instances, each with its own engine and pool,
// behind three servers, get 200 parallel requests with one key (see
// idemtest.TestMultiInstance).
func TestMultiInstance(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			pools := independentPools(t, b, 3)
			table := newStore(t, pools[0]).Table()
			stores := make([]idem.Store, len(pools))
			for i, db := range pools {
				s, err := New(db, WithTable(table), WithPurgeInterval(0))
				if err != nil {
					t.Fatal(err)
				}
				stores[i] = s
			}
			idemtest.TestMultiInstance(t, stores)
		})
	}
}
