package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// The payment provider settles every charge and refund some time after it
// was made: the charge's money reaches the account, the refund's leaves
// it. It says so with one settlement event per charge or refund, delivered
// at least once (by signed webhook, and with -events also on a Redis
// stream): the same event may come any number of times, in any order, by
// either way, and for longer than any idempotency record lives (a
// Standard Webhooks sender retries for about 27 hours, a stream keeps its
// entries until trimmed). Each event must change the ledger once: one
// Settlement row, and the charge or refund marked settled. The ledger
// makes that so by itself: a unique index allows one entry per charge or
// refund, and an event applied again is answered with the entry written
// the first time (ApplyEvent). The event's idempotency record
// (api.API.ApplyEvent runs the application through Engine.Do) only spares
// the work, and replays the first answer while it lives.

// The types of settlement events.
const (
	ChargeSettled = "charge.settled"
	RefundSettled = "refund.settled"
)

// The states of a charge or refund.
const (
	// StatusSucceeded: made, and not yet settled by the provider.
	StatusSucceeded = "succeeded"
	// StatusSettled: the provider's settlement event was applied.
	StatusSettled = "settled"
)

// ErrEventMismatch: a settlement event names a charge or refund of the
// account, but with another amount. The provider and the ledger disagree;
// applying the event again would not change that.
var ErrEventMismatch = errors.New("the settlement event does not match the charge or refund it names")

// Event is one settlement event of the provider.
type Event struct {
	// ID is the event's id, the same on every delivery of it (the Standard
	// Webhooks webhook-id): EventID of the object it settles.
	ID   string
	Type string // ChargeSettled or RefundSettled
	// Time is when the charge or refund was made, to the second.
	Time time.Time
	Data EventData
}

// EventData is what an event settles.
type EventData struct {
	Object  string `json:"object"`           // the charge's or refund's id
	Charge  string `json:"charge,omitempty"` // a refund's charge
	Account string `json:"account"`
	Amount  int64  `json:"amount"`
}

// eventBody is an event's payload as the Standard Webhooks specification
// shapes one: its type, a timestamp and its data. The id travels beside it
// (the webhook-id header, the stream entry's id field).
type eventBody struct {
	Type      string    `json:"type"`
	Timestamp string    `json:"timestamp"`
	Data      EventData `json:"data"`
}

// EventID is the id of the settlement event of the charge or refund
// object: one event per object, with the same id whichever instance of the
// demo, whichever settlement run, sends it.
func EventID(object string) string { return "evt_settled_" + object }

// Body is the event's payload, the same bytes every time it is sent: the
// body of its webhooks and of its stream entries, the payload its
// idempotency record is held to.
func (e Event) Body() []byte {
	b, err := json.Marshal(eventBody{Type: e.Type, Timestamp: e.Time.UTC().Format(time.RFC3339), Data: e.Data})
	if err != nil {
		panic(err) // a struct of strings and an integer
	}
	return b
}

// maxEventID is the longest event id the ledger keeps.
const maxEventID = 100

// ParseEvent reads the event id with payload body, as Body writes it. An
// event the ledger cannot apply is an InvalidError naming what is wrong.
func ParseEvent(id string, body []byte) (Event, error) {
	var b eventBody
	var problems []FieldError
	if err := json.Unmarshal(body, &b); err != nil {
		return Event{}, Invalid(FieldError{Pointer: "#", Detail: "must be a settlement event: a JSON object with type, timestamp and data"})
	}
	check := func(ok bool, f FieldError) {
		if !ok {
			problems = append(problems, f)
		}
	}
	check(id != "" && storable(id, maxEventID), FieldError{Header: "webhook-id", Detail: fmt.Sprintf("must be an event id of at most %d bytes", maxEventID)})
	check(b.Type == ChargeSettled || b.Type == RefundSettled, FieldError{Pointer: "#/type", Detail: "must be " + ChargeSettled + " or " + RefundSettled})
	at, err := time.Parse(time.RFC3339, b.Timestamp)
	check(err == nil, FieldError{Pointer: "#/timestamp", Detail: "must be an RFC 3339 time"})
	check(b.Data.Object != "" && storable(b.Data.Object, idSize), FieldError{Pointer: "#/data/object", Detail: "must be the id of a charge or refund"})
	check(b.Type != RefundSettled || storable(b.Data.Charge, idSize), FieldError{Pointer: "#/data/charge", Detail: "must be the id of the refund's charge"})
	check(b.Data.Account != "" && storable(b.Data.Account, accountSize), FieldError{Pointer: "#/data/account", Detail: "must name an account"})
	check(b.Data.Amount > 0 && b.Data.Amount <= MaxAmount, FieldError{Pointer: "#/data/amount", Detail: fmt.Sprintf("must be a positive integer number of cents, at most %d", MaxAmount)})
	if problems != nil {
		return Event{}, Invalid(problems...)
	}
	return Event{ID: id, Type: b.Type, Time: at, Data: b.Data}, nil
}

// Settlement is one entry of the ledger: a settlement event applied.
type Settlement struct {
	// ID numbers the entries in the order they were written.
	ID      int64  `gorm:"primaryKey;autoIncrement"`
	Account string `gorm:"size:200;not null;index"`
	Event   string `gorm:"size:100;not null;index"`
	Type    string `gorm:"size:20;not null"`
	// Object is the charge or refund the entry settles. Its unique index
	// is what keeps each one settled once, whatever became of its event's
	// idempotency record: expired, lost, or never committed with the
	// entry (records in Redis).
	Object  string `gorm:"size:40;not null;uniqueIndex"`
	Amount  int64  `gorm:"not null"`
	Created time.Time
}

// ApplyEvent applies e in tx: it writes the ledger entry and marks the
// charge or refund settled. It checks before it writes, so that an event
// it refuses leaves tx as it was: ErrNotFound if the account has no such
// object, ErrEventMismatch if the object has another amount (or the refund
// another charge), or was settled by another event. An object already
// settled by e (e delivered again, however long after) is answered with
// the entry written then, and nothing is written: existing is then true.
// The entry is inserted unless one exists for its object, in one statement
// that the unique index on Settlement.Object decides, so two applications
// of e at once, in two transactions, write one entry between them; the
// second waits for the first to commit, and gets its entry.
func ApplyEvent(tx *gorm.DB, e Event, now time.Time) (s Settlement, existing bool, err error) {
	var model any
	var amount int64
	switch e.Type {
	case ChargeSettled:
		var c Charge
		err := tx.Where("id = ? AND account = ?", e.Data.Object, e.Data.Account).Take(&c).Error
		if err != nil {
			return Settlement{}, false, notFound(err)
		}
		model, amount = &Charge{}, c.Amount
	case RefundSettled:
		var r Refund
		err := tx.Where("id = ? AND account = ?", e.Data.Object, e.Data.Account).Take(&r).Error
		if err != nil {
			return Settlement{}, false, notFound(err)
		}
		if r.Charge != e.Data.Charge {
			return Settlement{}, false, ErrEventMismatch
		}
		model, amount = &Refund{}, r.Amount
	default:
		return Settlement{}, false, Invalid(FieldError{Pointer: "#/type", Detail: "must be " + ChargeSettled + " or " + RefundSettled})
	}
	if amount != e.Data.Amount {
		return Settlement{}, false, ErrEventMismatch
	}
	// Settled already?
	prev, found, err := settlementOf(tx, e.Data.Object, false)
	switch {
	case err != nil:
		return Settlement{}, false, err
	case found:
		return settledBefore(prev, e)
	}
	s = Settlement{Account: e.Data.Account, Event: e.ID, Type: e.Type, Object: e.Data.Object, Amount: amount,
		Created: now.UTC().Truncate(time.Second)}
	// Inserted unless an entry for the object exists by now: another
	// application of the event, in a transaction that committed meanwhile,
	// which this statement waited for.
	inserted, err := insertUnlessSettled(tx, &s)
	if err != nil {
		return Settlement{}, false, err
	}
	if !inserted {
		prev, found, err = settlementOf(tx, e.Data.Object, true)
		switch {
		case err != nil:
			return Settlement{}, false, err
		case !found:
			return Settlement{}, false, fmt.Errorf("no ledger entry for %s, yet its insert met one", e.Data.Object)
		}
		return settledBefore(prev, e)
	}
	if err := tx.Model(model).Where("id = ?", e.Data.Object).Update("status", StatusSettled).Error; err != nil {
		return Settlement{}, false, err
	}
	return s, false, nil
}

// insertUnlessSettled inserts s unless the ledger has an entry for its
// object, in one statement, and reports whether it did. MySQL and MariaDB
// say INSERT IGNORE (their ON DUPLICATE KEY UPDATE reports a row, and
// MariaDB returns the existing entry's id); the others ON CONFLICT DO
// NOTHING. The values are checked before (ParseEvent, and the object's
// own row), so IGNORE has no other error to hide.
func insertUnlessSettled(tx *gorm.DB, s *Settlement) (bool, error) {
	var once clause.Expression = clause.OnConflict{DoNothing: true}
	if tx.Dialector.Name() == "mysql" {
		once = clause.Insert{Modifier: "IGNORE"}
	}
	res := tx.Clauses(once).Create(s)
	return res.Error == nil && res.RowsAffected == 1 && s.ID != 0, res.Error
}

// settlementOf reads the entry that settles object. Locking (shared, as
// the insert that met it locks it, so that those waiting on it together
// do not deadlock), it also sees an entry that another transaction
// committed after this one began (MySQL's snapshot would not).
func settlementOf(tx *gorm.DB, object string, locking bool) (Settlement, bool, error) {
	var s Settlement
	if locking {
		tx = tx.Clauses(clause.Locking{Strength: "SHARE"})
	}
	err := tx.Where("object = ?", object).Take(&s).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Settlement{}, false, nil
	}
	return s, err == nil, err
}

// settledBefore is ApplyEvent's answer to e, whose object the entry prev
// settled already: prev itself if e wrote it, ErrEventMismatch if another
// event did.
func settledBefore(prev Settlement, e Event) (Settlement, bool, error) {
	if prev.Event != e.ID || prev.Type != e.Type || prev.Account != e.Data.Account || prev.Amount != e.Data.Amount {
		return Settlement{}, false, ErrEventMismatch
	}
	return prev, true, nil
}

// ApplyEventAlone is ApplyEvent in a transaction of its own on db, for
// records kept apart from the ledger (in Redis), which no transaction
// joins to the entry.
func ApplyEventAlone(db *gorm.DB, e Event, now time.Time) (s Settlement, existing bool, err error) {
	err = db.Transaction(func(tx *gorm.DB) error {
		s, existing, err = ApplyEvent(tx, e, now)
		return err
	})
	return s, existing, err
}

func notFound(err error) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return ErrNotFound
	}
	return err
}

// maxPending bounds the charges, and the refunds, one settlement run
// reads: the oldest, so that a backlog is worked off in order, and the
// provider has at most that many of each under way.
const maxPending = 500

// PendingEvents returns the settlement events of the charges and refunds
// not yet settled, oldest first, at most maxPending of each; full reports
// that there may be more. They are the provider's books: a real provider
// knows the payments it took and the refunds it made, and the simulated
// one reads them from the demo's database.
func PendingEvents(ctx context.Context, db *gorm.DB) (events []Event, full bool, err error) {
	db = db.WithContext(ctx)
	var charges []Charge
	if err := db.Select("id", "account", "amount", "created").Where("status = ?", StatusSucceeded).Order("seq").Limit(maxPending).Find(&charges).Error; err != nil {
		return nil, false, err
	}
	var refunds []Refund
	if err := db.Select("id", "charge", "account", "amount", "created").Where("status = ?", StatusSucceeded).Order("created, id").Limit(maxPending).Find(&refunds).Error; err != nil {
		return nil, false, err
	}
	return settlementEvents(charges, refunds), len(charges) == maxPending || len(refunds) == maxPending, nil
}

// settlementEvents returns the settlement events of charges and refunds,
// the same bytes whenever they are made (Event.Body).
func settlementEvents(charges []Charge, refunds []Refund) []Event {
	var events []Event
	for _, c := range charges {
		events = append(events, Event{ID: EventID(c.ID), Type: ChargeSettled, Time: c.Created,
			Data: EventData{Object: c.ID, Account: c.Account, Amount: c.Amount}})
	}
	for _, r := range refunds {
		events = append(events, Event{ID: EventID(r.ID), Type: RefundSettled, Time: r.Created,
			Data: EventData{Object: r.ID, Charge: r.Charge, Account: r.Account, Amount: r.Amount}})
	}
	return events
}

// AccountEvents returns the settlement events of every charge and refund
// of account, settled or not: what a provider whose deliveries come late
// may send again. (The storm's redelivery reads it.)
func AccountEvents(ctx context.Context, db *gorm.DB, account string) ([]Event, error) {
	db = db.WithContext(ctx)
	var charges []Charge
	if err := db.Select("id", "account", "amount", "created").Where("account = ?", account).Order("seq").Find(&charges).Error; err != nil {
		return nil, err
	}
	var refunds []Refund
	if err := db.Select("id", "charge", "account", "amount", "created").Where("account = ?", account).Order("created, id").Find(&refunds).Error; err != nil {
		return nil, err
	}
	return settlementEvents(charges, refunds), nil
}

// ListSettlements returns up to limit of account's ledger entries, in the
// order they were written, after the entry numbered after (0: from the
// first), and whether more follow.
func ListSettlements(ctx context.Context, db *gorm.DB, account string, limit int, after int64) ([]Settlement, bool, error) {
	list := []Settlement{}
	if err := ValidAccount(account); err != nil {
		return list, false, err
	}
	err := db.WithContext(ctx).Where("account = ? AND id > ?", account, after).Order("id").Limit(limit + 1).Find(&list).Error
	if more := len(list) > limit; more {
		return list[:limit], true, err
	}
	return list, false, err
}
