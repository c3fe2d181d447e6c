package payments

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
)

// chargeOf writes a charge of amount for account, with a refund of
// refund if above 0, and returns both.
func chargeOf(t *testing.T, db *gorm.DB, account string, amount, refund int64) (Charge, Refund) {
	t.Helper()
	c := Charge{ID: newID("ch_"), Account: account, Amount: amount, Currency: "usd", Customer: "cus_1", Status: StatusSucceeded,
		Created: time.Now().UTC().Truncate(time.Second)}
	if err := db.Create(&c).Error; err != nil {
		t.Fatal(err)
	}
	if refund == 0 {
		return c, Refund{}
	}
	r, err := CreateRefund(t.Context(), func() (*gorm.DB, error) { return db, nil }, account, RefundRequest{Charge: c.ID, Amount: refund}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return c, r
}

// pendingWhere returns the pending events that keep says to.
func pendingWhere(t *testing.T, db *gorm.DB, keep func(Event) bool) []Event {
	t.Helper()
	pending, _, err := PendingEvents(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	var found []Event
	for _, e := range pending {
		if keep(e) {
			found = append(found, e)
		}
	}
	return found
}

// eventsOf returns the pending events of the given objects.
func eventsOf(t *testing.T, db *gorm.DB, objects ...string) []Event {
	t.Helper()
	found := pendingWhere(t, db, func(e Event) bool { return slices.Contains(objects, e.Data.Object) })
	if len(found) != len(objects) {
		t.Fatalf("pending events %v, want one for each of %v", found, objects)
	}
	return found
}

func TestEventBodyReadsBack(t *testing.T) {
	e := Event{ID: EventID("re_1"), Type: RefundSettled, Time: time.Date(2031, 2, 3, 4, 5, 6, 0, time.UTC),
		Data: EventData{Object: "re_1", Charge: "ch_1", Account: "acct_1", Amount: 500}}
	body := e.Body()
	if string(body) != `{"type":"refund.settled","timestamp":"2031-02-03T04:05:06Z","data":{"object":"re_1","charge":"ch_1","account":"acct_1","amount":500}}` {
		t.Fatalf("body %s", body)
	}
	got, err := ParseEvent(e.ID, body)
	if err != nil || got.ID != e.ID || got.Type != e.Type || !got.Time.Equal(e.Time) || got.Data != e.Data {
		t.Fatalf("ParseEvent(Body) = %+v, %v; want %+v", got, err, e)
	}
	for id, body := range map[string]string{
		"evt_1":    `[]`,
		"evt_2":    `{"type":"charge.refunded","timestamp":"2031-02-03T04:05:06Z","data":{"object":"ch_1","account":"a","amount":1}}`,
		"evt_3":    `{"type":"charge.settled","timestamp":"yesterday","data":{"object":"ch_1","account":"a","amount":1}}`,
		"evt_4":    `{"type":"charge.settled","timestamp":"2031-02-03T04:05:06Z","data":{"object":"","account":"a","amount":1}}`,
		"evt_5":    `{"type":"charge.settled","timestamp":"2031-02-03T04:05:06Z","data":{"object":"ch_1","account":"","amount":1}}`,
		"evt_6":    `{"type":"charge.settled","timestamp":"2031-02-03T04:05:06Z","data":{"object":"ch_1","account":"a","amount":0}}`,
		"":         string(e.Body()),
		"evt_\x00": string(e.Body()),
	} {
		if _, err := ParseEvent(id, []byte(body)); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseEvent(%q, %s) = %v, want ErrInvalid", id, body, err)
		}
	}
}

// TestApplyEvent: an event writes one ledger entry and settles its charge
// or refund; one the ledger cannot match writes nothing.
func TestApplyEvent(t *testing.T) {
	for name, db := range testDBs(t) {
		t.Run(name, func(t *testing.T) {
			acct := "acct_" + newID("")
			c, r := chargeOf(t, db, acct, 1000, 300)
			events := eventsOf(t, db, c.ID, r.ID)
			now := time.Now()

			wrong := events[0]
			wrong.Data.Amount++
			otherAccount := events[0]
			otherAccount.Data.Account = "acct_other"
			refundOfAnother := events[1]
			refundOfAnother.Data.Charge = "ch_other"
			for e, want := range map[*Event]error{&wrong: ErrEventMismatch, &otherAccount: ErrNotFound, &refundOfAnother: ErrEventMismatch} {
				if _, _, err := ApplyEvent(db, *e, now); !errors.Is(err, want) {
					t.Fatalf("ApplyEvent(%+v) = %v, want %v", *e, err, want)
				}
			}
			if b, _ := GetBalance(t.Context(), db, acct); b.Settlements != 0 {
				t.Fatalf("refused events wrote %d entries", b.Settlements)
			}

			for _, e := range events {
				s, existing, err := ApplyEvent(db, e, now)
				if err != nil || existing || s.ID == 0 || s.Event != e.ID || s.Amount != e.Data.Amount || s.Object != e.Data.Object {
					t.Fatalf("ApplyEvent(%+v) = %+v, %v", e, s, err)
				}
			}
			b, err := GetBalance(t.Context(), db, acct)
			if err != nil || b.SettledCharged != 1000 || b.SettledRefunded != 300 || b.Settled != 700 || b.Settlements != 2 {
				t.Fatalf("balance %+v, %v: want 1000 settled charged, 300 refunded, 700 net, 2 entries", b, err)
			}
			if got, _ := GetCharge(t.Context(), db, acct, c.ID); got.Status != StatusSettled {
				t.Fatalf("charge status %q, want %q", got.Status, StatusSettled)
			}
			if pending := pendingWhere(t, db, func(e Event) bool { return e.Data.Account == acct }); len(pending) != 0 {
				t.Fatalf("settled objects still pending: %v", pending)
			}
			// Settled, their events are still the same bytes for a
			// provider that sends them again.
			all, err := AccountEvents(t.Context(), db, acct)
			if err != nil || len(all) != 2 || string(all[0].Body()) != string(events[0].Body()) || string(all[1].Body()) != string(events[1].Body()) {
				t.Fatalf("AccountEvents once settled: %+v, %v; want %+v", all, err, events)
			}
			list, more, err := ListSettlements(t.Context(), db, acct, 1, 0)
			if err != nil || len(list) != 1 || !more || list[0].Type != ChargeSettled {
				t.Fatalf("first page %+v (more %v), %v", list, more, err)
			}
			if next, more, _ := ListSettlements(t.Context(), db, acct, 1, list[0].ID); len(next) != 1 || more || next[0].Type != RefundSettled {
				t.Fatalf("second page %+v (more %v)", next, more)
			}
		})
	}
}

// TestApplyEventAloneAtOnce: deliveries of one event that run at once,
// each in a transaction of its own (records apart from the ledger, or
// records that expired meanwhile), write one entry between them,
// whichever reaches the database first; the others get it back.
func TestApplyEventAloneAtOnce(t *testing.T) {
	for name, db := range testDBs(t) {
		t.Run(name, func(t *testing.T) {
			acct := "acct_" + newID("")
			c, _ := chargeOf(t, db, acct, 1000, 0)
			e := eventsOf(t, db, c.ID)[0]
			const n = 8
			var wg sync.WaitGroup
			got := make([]Settlement, n)
			existing := make([]bool, n)
			errs := make([]error, n)
			for i := range n {
				wg.Go(func() { got[i], existing[i], errs[i] = ApplyEventAlone(db, e, time.Now()) })
			}
			wg.Wait()
			written := 0
			for i := range n {
				if errs[i] != nil || got[i].ID != got[0].ID {
					t.Fatalf("delivery %d: %+v, %v; want entry %d", i, got[i], errs[i], got[0].ID)
				}
				if !existing[i] {
					written++
				}
			}
			if b, _ := GetBalance(t.Context(), db, acct); written != 1 || b.Settlements != 1 || b.SettledCharged != 1000 {
				t.Fatalf("%d deliveries wrote %d entries (%d said they wrote one), want 1", n, b.Settlements, written)
			}
		})
	}
}

// TestProviderRedeliversUntilApplied: the provider sends an event when it
// first sees it pending, again once RedeliverAfter has passed without its
// being applied, and forgets it once applied; it counts each event once.
func TestProviderRedeliversUntilApplied(t *testing.T) {
	now := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &Provider{RedeliverAfter: 10 * time.Second, now: func() time.Time { return now }}
	ev := func(id string) Event { return Event{ID: id, Data: EventData{Account: "a"}} }
	ids := func(es []Event) []string {
		var s []string
		for _, e := range es {
			s = append(s, e.ID)
		}
		return s
	}
	if got := ids(p.Due([]Event{ev("e1"), ev("e2")}, false)); !slices.Equal(got, []string{"e1", "e2"}) {
		t.Fatalf("first run: %v", got)
	}
	now = now.Add(5 * time.Second)
	if got := ids(p.Due([]Event{ev("e1"), ev("e2"), ev("e3")}, false)); !slices.Equal(got, []string{"e3"}) {
		t.Fatalf("within RedeliverAfter: %v, want only the new e3", got)
	}
	now = now.Add(5 * time.Second)
	if got := ids(p.Due([]Event{ev("e2"), ev("e3")}, false)); !slices.Equal(got, []string{"e2"}) {
		t.Fatalf("after RedeliverAfter: %v, want e2 again (e1 was applied, e3 is recent)", got)
	}
	if _, kept := p.sent["e1"]; kept {
		t.Fatal("e1, applied, is still remembered")
	}
	// A partial list says nothing of the events it lacks.
	p.Due([]Event{ev("e3")}, true)
	if _, kept := p.sent["e2"]; !kept {
		t.Fatal("e2 was forgotten on a partial list")
	}
	if c := p.Counts("a"); c.Events != 3 {
		t.Fatalf("%d events counted, want 3", c.Events)
	}
}

// TestSettledOnceByTheLedger: the ledger itself settles a charge or
// refund once. An event applied again, whatever its idempotency record
// (expired, lost, or another delivery's), writes no second entry and
// moves no money: it is answered with the entry written the first time.
// Another event for a settled object is refused.
func TestSettledOnceByTheLedger(t *testing.T) {
	for name, db := range testDBs(t) {
		t.Run(name, func(t *testing.T) {
			acct := "acct_" + newID("")
			c, r := chargeOf(t, db, acct, 1000, 300)
			for _, e := range eventsOf(t, db, c.ID, r.ID) {
				first, existing, err := ApplyEvent(db, e, time.Now())
				if err != nil || existing {
					t.Fatalf("%s: %+v existing=%v, %v", e.Type, first, existing, err)
				}
				again, existing, err := ApplyEvent(db, e, time.Now().Add(25*time.Hour))
				if err != nil || !existing || again.ID != first.ID || again.Event != e.ID || again.Amount != first.Amount || !again.Created.Equal(first.Created) {
					t.Fatalf("%s applied again: %+v existing=%v, %v; want entry %+v again", e.Type, again, existing, err, first)
				}
				other := e
				other.ID += "_other"
				if _, _, err := ApplyEvent(db, other, time.Now()); !errors.Is(err, ErrEventMismatch) {
					t.Fatalf("another event for the settled %s: %v, want ErrEventMismatch", e.Data.Object, err)
				}
			}
			if b, _ := GetBalance(t.Context(), db, acct); b.Settlements != 2 || b.SettledCharged != 1000 || b.SettledRefunded != 300 {
				t.Fatalf("balance %+v after each event applied twice: want 2 entries, 1000 charged and 300 refunded settled", b)
			}
		})
	}
}

// TestMigrateRefusesALedgerSettledTwice: a ledger written before the
// unique index, with a charge settled twice, is not migrated as it is:
// the start fails and names the charge, for an operator to decide which
// entry to keep.
func TestMigrateRefusesALedgerSettledTwice(t *testing.T) {
	before := func(ctx context.Context, db *gorm.DB) error {
		type settlement struct { // as it was: no unique index on object
			ID      int64  `gorm:"primaryKey;autoIncrement"`
			Account string `gorm:"size:200;not null;index"`
			Event   string `gorm:"size:100;not null;index"`
			Type    string `gorm:"size:20;not null"`
			Object  string `gorm:"size:40;not null"`
			Amount  int64  `gorm:"not null"`
			Created time.Time
		}
		if err := db.WithContext(ctx).AutoMigrate(&settlement{}); err != nil {
			return err
		}
		for range 2 {
			if err := db.Create(&settlement{Account: "acct_1", Event: EventID("ch_TWICE"), Type: ChargeSettled, Object: "ch_TWICE", Amount: 5}).Error; err != nil {
				return err
			}
		}
		return nil
	}
	for name, db := range openTestDBs(t, before) {
		t.Run(name, func(t *testing.T) {
			if err := Migrate(t.Context(), db); err == nil || !strings.Contains(err.Error(), "ch_TWICE") {
				t.Fatalf("Migrate over a ledger that settled ch_TWICE twice: %v, want an error naming it", err)
			}
			if err := db.Where("id = ?", 2).Delete(&Settlement{}).Error; err != nil {
				t.Fatal(err)
			}
			if err := Migrate(t.Context(), db); err != nil {
				t.Fatalf("Migrate once the second entry is gone: %v", err)
			}
			if !db.Migrator().HasIndex(&Settlement{}, "Object") {
				t.Fatal("no unique index on the settlements' object after the migration")
			}
		})
	}
}
