package payments

import (
	"errors"
	"slices"
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
				if _, err := ApplyEvent(db, *e, now); !errors.Is(err, want) {
					t.Fatalf("ApplyEvent(%+v) = %v, want %v", *e, err, want)
				}
			}
			if b, _ := GetBalance(t.Context(), db, acct); b.Settlements != 0 {
				t.Fatalf("refused events wrote %d entries", b.Settlements)
			}

			for _, e := range events {
				s, err := ApplyEvent(db, e, now)
				if err != nil || s.ID == 0 || s.Event != e.ID || s.Amount != e.Data.Amount || s.Object != e.Data.Object {
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

// TestApplyEventOnceUnderOneKey: with the records apart from the ledger,
// deliveries of one event that run at once write one entry, whichever
// reaches the database first; the others get it back.
func TestApplyEventOnceUnderOneKey(t *testing.T) {
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
				wg.Go(func() { got[i], existing[i], errs[i] = ApplyEventOnce(db, "key_"+e.ID, e, time.Now()) })
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
