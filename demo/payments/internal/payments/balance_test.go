package payments

import (
	"context"
	"crypto/rand"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testservers"
	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	"gorm.io/gorm/schema"
)

// testDBs opens the demo's tables on SQLite and, from `make test`'s
// servers, PostgreSQL and MariaDB. Each gets tables of its own (a random
// prefix, dropped afterwards), so tests running at the same time on one
// server never share rows or migrations.
func testDBs(t *testing.T) map[string]*gorm.DB {
	t.Helper()
	return openTestDBs(t, Migrate)
}

// openTestDBs is testDBs with the tables made by prepare instead of
// Migrate.
func openTestDBs(t *testing.T, prepare func(context.Context, *gorm.DB) error) map[string]*gorm.DB {
	t.Helper()
	prefix := "t" + strings.ToLower(rand.Text()[:8]) + "_"
	cfg := func() *gorm.Config {
		return &gorm.Config{Logger: logger.Discard, NamingStrategy: schema.NamingStrategy{TablePrefix: prefix}}
	}
	dbs := map[string]*gorm.DB{}
	open := func(name string, db *gorm.DB, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := prepare(t.Context(), db); err != nil {
			t.Fatalf("%s: migrate: %v", name, err)
		}
		t.Cleanup(func() {
			db.Migrator().DropTable(&Charge{}, &Refund{}, &KeyUse{}, &Settlement{})
			if sqlDB, err := db.DB(); err == nil {
				sqlDB.Close()
			}
		})
		dbs[name] = db
	}
	db, err := sqlitedb.Open(filepath.Join(t.TempDir(), "p.db"), cfg())
	open("sqlite", db, err)
	pg, my := testservers.Optional(t, testservers.PostgresDSN), testservers.Optional(t, testservers.MySQLDSN)
	if pg == "" || my == "" {
		return dbs // -short: SQLite only
	}
	db, err = gorm.Open(postgres.Open(pg), cfg())
	open("postgres", db, err)
	if !strings.Contains(my, "parseTime=") {
		my += map[bool]string{true: "&", false: "?"}[strings.Contains(my, "?")] + "parseTime=true"
	}
	db, err = gorm.Open(mysql.Open(my), cfg())
	open("mysql", db, err)
	return dbs
}

// chargeAndRefund writes a charge of amount and refunds all of it, as the
// API does: the refund in a transaction of its own.
func chargeAndRefund(ctx context.Context, db *gorm.DB, account string, amount int64) error {
	c := Charge{ID: newID("ch_"), Account: account, Amount: amount, Currency: "usd", Customer: "cus_1", Status: "succeeded", Created: time.Now().UTC()}
	if err := db.WithContext(ctx).Create(&c).Error; err != nil {
		return err
	}
	tx := db.WithContext(ctx).Begin()
	if tx.Error != nil {
		return tx.Error
	}
	if _, err := CreateRefund(ctx, func() (*gorm.DB, error) { return tx, nil }, account, RefundRequest{Charge: c.ID, Amount: amount}, time.Now()); err != nil {
		tx.Rollback()
		return err
	}
	return tx.Commit().Error
}

// TestBalanceIsOneSnapshot: GetBalance reads the charges and the refunds as
// of one moment. Here a charge and its refund commit while it runs, between
// two of its statements if it makes more than one: the balance must show
// both or neither, never the refund without its charge.
func TestBalanceIsOneSnapshot(t *testing.T) {
	for name, db := range testDBs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			acct := "acct_" + rand.Text()[:10]
			first := Charge{ID: newID("ch_"), Account: acct, Amount: 100, Currency: "usd", Customer: "cus_1", Status: "succeeded", Created: time.Now().UTC()}
			if err := db.Create(&first).Error; err != nil {
				t.Fatal(err)
			}
			var (
				statements atomic.Int32
				armed      atomic.Bool
				wrote      bool
				writeErr   error
			)
			// Before every statement of GetBalance but its first.
			interleave := func(*gorm.DB) {
				if armed.Load() && statements.Add(1) > 1 && armed.CompareAndSwap(true, false) {
					wrote, writeErr = true, chargeAndRefund(context.WithoutCancel(ctx), db, acct, 500)
				}
			}
			if err := db.Callback().Row().Before("gorm:row").Register("test:interleave", interleave); err != nil {
				t.Fatal(err)
			}
			if err := db.Callback().Query().Before("gorm:query").Register("test:interleave", interleave); err != nil {
				t.Fatal(err)
			}
			armed.Store(true)
			b, err := GetBalance(ctx, db, acct)
			armed.Store(false)
			if err != nil {
				t.Fatal(err)
			}
			if !wrote { // one statement: the write comes after it
				writeErr = chargeAndRefund(ctx, db, acct, 500)
			}
			if writeErr != nil {
				t.Fatalf("the charge and refund written while the balance was read: %v", writeErr)
			}
			before := Balance{Charged: 100, Charges: 1}
			after := Balance{Charged: 600, Refunded: 500, Charges: 2, Refunds: 1}
			if b != before && b != after {
				t.Fatalf("balance %+v: neither %+v (before the refund) nor %+v (after it)", b, before, after)
			}
			if b, err = GetBalance(ctx, db, acct); err != nil || b != after {
				t.Fatalf("balance afterwards %+v (%v), want %+v", b, err, after)
			}
		})
	}
}

// TestBalanceNeverRefundsMoreThanCharged: while charges are made and
// refunded in full on several connections, no balance read shows more
// refunded than charged.
func TestBalanceNeverRefundsMoreThanCharged(t *testing.T) {
	const writers, rounds = 4, 40
	for name, db := range testDBs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			acct := "acct_" + rand.Text()[:10]
			var wg sync.WaitGroup
			var done atomic.Int32
			errs := make(chan error, writers)
			for range writers {
				wg.Go(func() {
					defer done.Add(1)
					for range rounds {
						if err := chargeAndRefund(ctx, db, acct, 100); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			polls := 0
			for done.Load() < writers {
				b, err := GetBalance(ctx, db, acct)
				if err != nil {
					t.Fatal(err)
				}
				polls++
				if b.Refunded > b.Charged || b.Refunds > b.Charges {
					wg.Wait()
					t.Fatalf("poll %d: %+v refunds more than was charged", polls, b)
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if b, err := GetBalance(ctx, db, acct); err != nil || b.Charges != writers*rounds || b.Refunded != b.Charged {
				t.Fatalf("final balance %+v (%v), want %d charges all refunded", b, err, writers*rounds)
			}
			t.Logf("%d balance reads during %d charges and refunds", polls, writers*rounds)
		})
	}
}
