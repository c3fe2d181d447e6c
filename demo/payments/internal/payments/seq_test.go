package payments

import (
	"context"
	"crypto/rand"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"
)

// listIDs returns the ids of account's charges as ListCharges lists them,
// page by page of size limit.
func listIDs(t *testing.T, db *gorm.DB, account string, limit int) []string {
	t.Helper()
	var ids []string
	after := ""
	for {
		page, more, err := ListCharges(t.Context(), db, account, limit, after)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range page {
			ids = append(ids, c.ID)
		}
		if !more {
			return ids
		}
		if len(ids) > 1000 {
			t.Fatalf("the pages never end: %v", ids)
		}
		after = ids[len(ids)-1]
	}
}

// TestChargesListNewestFirst: charges made one after the other within one
// second, whose times tie and whose random ids say nothing of their order,
// are listed newest first, in one page or in several.
func TestChargesListNewestFirst(t *testing.T) {
	for name, db := range testDBs(t) {
		t.Run(name, func(t *testing.T) {
			acct, other := "acct_"+rand.Text()[:10], "acct_"+rand.Text()[:10]
			now := time.Now()
			tx := func() (*gorm.DB, error) { return db, nil }
			var made []string
			for i := range 8 {
				c, err := CreateCharge(t.Context(), db, tx, &Provider{}, acct, "p-"+rand.Text(), ChargeRequest{Amount: int64(100 + i), Currency: "usd", Customer: "cus_1"}, now)
				if err != nil {
					t.Fatal(err)
				}
				made = append(made, c.ID)
				// Another account's charges in between take numbers too.
				if _, err := CreateCharge(t.Context(), db, tx, &Provider{}, other, "p-"+rand.Text(), ChargeRequest{Amount: 1, Currency: "usd", Customer: "cus_1"}, now); err != nil {
					t.Fatal(err)
				}
			}
			slices.Reverse(made)
			for _, limit := range []int{100, 3, 1} {
				if got := listIDs(t, db, acct, limit); !slices.Equal(got, made) {
					t.Fatalf("listed in pages of %d: %v\nmade, newest first: %v", limit, got, made)
				}
			}
		})
	}
}

// legacyCharge is the charges table as it was before seq: a database the
// demo ran on then has its charges in one.
type legacyCharge struct {
	ID          string `gorm:"primaryKey;size:40"`
	Account     string `gorm:"size:200;not null"`
	Amount      int64  `gorm:"not null"`
	Refunded    int64  `gorm:"not null;default:0"`
	Currency    string `gorm:"size:3;not null"`
	Customer    string `gorm:"size:200;not null"`
	Description string `gorm:"size:1000;not null;default:''"`
	Status      string `gorm:"size:20;not null"`
	Created     time.Time
	RequestKey  *string `gorm:"size:80;uniqueIndex"`
}

// TestMigrateNumbersEarlierCharges: on a database whose charges predate
// seq, Migrate numbers them in the order they were listed in (created,
// then id), and a charge made afterwards is listed first. Migrating again
// changes nothing.
func TestMigrateNumbersEarlierCharges(t *testing.T) {
	var table string
	legacy := func(ctx context.Context, db *gorm.DB) error {
		stmt := &gorm.Statement{DB: db}
		if err := stmt.Parse(&Charge{}); err != nil {
			return err
		}
		table = stmt.Schema.Table
		return db.WithContext(ctx).Table(table).AutoMigrate(&legacyCharge{})
	}
	for name, db := range openTestDBs(t, legacy) {
		t.Run(name, func(t *testing.T) {
			acct := "acct_" + rand.Text()[:10]
			base := time.Now().UTC().Truncate(time.Second)
			var old []legacyCharge
			for _, offset := range []time.Duration{0, 0, time.Second, -time.Second, time.Second, 0} {
				old = append(old, legacyCharge{ID: newID("ch_"), Account: acct, Amount: 100, Currency: "usd", Customer: "cus_1",
					Status: "succeeded", Created: base.Add(offset)})
			}
			if err := db.Table(table).Create(&old).Error; err != nil {
				t.Fatal(err)
			}
			sort.Slice(old, func(i, j int) bool {
				if !old[i].Created.Equal(old[j].Created) {
					return old[i].Created.After(old[j].Created)
				}
				return old[i].ID > old[j].ID
			})
			var want []string
			for _, c := range old {
				want = append(want, c.ID)
			}

			for range 2 {
				if err := Migrate(t.Context(), db); err != nil {
					t.Fatalf("migrate: %v", err)
				}
				if got := listIDs(t, db, acct, 4); !slices.Equal(got, want) {
					t.Fatalf("after the migration the charges list as %v, before as %v", got, want)
				}
			}
			c, err := CreateCharge(t.Context(), db, func() (*gorm.DB, error) { return db, nil }, &Provider{}, acct, "p-"+rand.Text(),
				ChargeRequest{Amount: 5, Currency: "usd", Customer: "cus_1"}, base.Add(-time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if got := listIDs(t, db, acct, 100); got[0] != c.ID || !slices.Equal(got[1:], want) {
				t.Fatalf("a charge made after the migration (%s) lists as %s", c.ID, strings.Join(got, ", "))
			}
		})
	}
}
