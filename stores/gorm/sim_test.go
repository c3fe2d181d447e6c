package gormstore

import (
	"context"
	"flag"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemsim"
	"gorm.io/gorm"
)

// simOptions are the deterministic simulation's flags: -seed N replays
// one seed, -simtime sets the budget per database (default
// $IDEMKIT_SIMTIME or 2s).
var simOptions = idemsim.Flags(flag.CommandLine)

// simStore is the store under simulation, with the count of its rows that
// the simulation checks after each run.
type simStore struct {
	*Store
	db *gorm.DB
}

// Len implements idemsim.Counter.
func (s simStore) Len() int {
	var n int64
	if err := s.db.Raw("SELECT COUNT(*) FROM " + s.sql.quotedTableName).Scan(&n).Error; err != nil {
		return -1
	}
	return int(n)
}

// TestSim runs the deterministic simulation (package idemsim) against the
// store on SQLite and on the PostgreSQL server of the tests: every seed
// gets a table of its own, on the real database, with the simulation's
// virtual clock passed in through the Engine, as the store reads no clock
// of its own.
func TestSim(t *testing.T) {
	for _, b := range []struct {
		name   string
		open   func(testing.TB) *gorm.DB
		remote bool
	}{
		{"sqlite", openSQLite, false},
		{"postgres", openPostgres, true},
	} {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			idemsim.Run(t, idemsim.Target{
				Open: func(tb testing.TB) (idem.Store, func()) {
					s, err := New(db, WithTable(uniqueTable("sim")), WithPurgeInterval(0))
					if err != nil {
						tb.Fatal(err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					if err := s.AutoMigrate(ctx); err != nil {
						tb.Fatal(err)
					}
					return simStore{s, db}, func() {
						_ = s.Close()
						dropTable(tb, db, s.sql.quotedTableName)
					}
				},
				Remote: b.remote,
				Replay: "go test ./stores/gorm -run 'TestSim/" + b.name + "' -seed %d -v",
			}, simOptions)
		})
	}
}
