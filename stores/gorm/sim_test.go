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

// Len implements idemsim.Counter: the table's rows, and on SQLite the
// records in flight, which live in memory.
func (s simStore) Len() int {
	var n int64
	if err := s.db.Raw("SELECT COUNT(*) FROM " + s.sql.quotedTableName).Scan(&n).Error; err != nil {
		return -1
	}
	if s.local != nil {
		n += int64(s.local.table.count())
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
		// work: handlers write through Tx. Not on SQLite, whose one
		// writer would be the open transaction of a handler waiting for
		// its turn: the simulation runs one step at a time, and every
		// other request's statement would wait out the busy timeout.
		work bool
	}{
		{"sqlite", openSQLite, false, false},
		{"postgres", openPostgres, true, true},
	} {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			var effects *simWork
			if b.work {
				effects = newSimWork(t, db)
			}
			idemsim.Run(t, idemsim.Target{
				Effects: effects.effects(),
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
					if effects != nil {
						effects.reset(tb)
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

// simWork is the handlers' business work: one row per handler run, in a
// table of the test's own, written through Tx so that the store's
// completion commits it.
type simWork struct {
	db    *gorm.DB
	table string
}

func newSimWork(t *testing.T, db *gorm.DB) *simWork {
	w := &simWork{db: db, table: uniqueTable("sim_work")}
	if err := db.Exec("CREATE TABLE " + w.table + " (execution bigint PRIMARY KEY)").Error; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropTable(t, db, w.table) })
	return w
}

// reset empties the table before a run.
func (w *simWork) reset(tb testing.TB) {
	if err := w.db.Exec("DELETE FROM " + w.table).Error; err != nil {
		tb.Fatal(err)
	}
}

func (w *simWork) effects() *idemsim.Effects {
	if w == nil {
		return nil
	}
	return &idemsim.Effects{
		Wrap: TxMiddleware,
		Write: func(ctx context.Context, execution int) error {
			tx, err := Tx(ctx, w.db)
			if err != nil {
				return err
			}
			return tx.Exec("INSERT INTO "+w.table+" (execution) VALUES (?)", execution).Error
		},
		Committed: func() ([]int, error) {
			var done []int
			err := w.db.Raw("SELECT execution FROM " + w.table + " ORDER BY execution").Scan(&done).Error
			return done, err
		},
	}
}
