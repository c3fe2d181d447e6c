// Package payments is the demo's business logic: charges, refunds and
// balances per account, stored with GORM, and the simulated payment
// provider. It knows nothing about HTTP; the API layer decides which
// transaction it writes in and which idempotency key the provider gets.
package payments

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"gorm.io/gorm"
)

// Charge is a payment taken from a customer.
type Charge struct {
	ID          string    `gorm:"primaryKey;size:40"` // idSize
	Account     string    `gorm:"size:200;not null"`
	Amount      int64     `gorm:"not null"`
	Refunded    int64     `gorm:"not null;default:0"`
	Currency    string    `gorm:"size:3;not null"`
	Customer    string    `gorm:"size:200;not null"`
	Description string    `gorm:"size:1000;not null;default:''"`
	Status      string    `gorm:"size:20;not null;index"` // StatusSucceeded, then StatusSettled
	Created     time.Time `gorm:"not null"`
	// Seq orders the charges: the database numbers each one as it takes
	// it, higher than every charge before (see migrateSeq), so a list of
	// charges is newest first whatever their times, to the nanosecond or
	// not. Read only: the database writes it.
	Seq int64 `gorm:"->;-:migration"`
	// RequestKey is the scoped idempotency key of the request that wrote
	// the charge, hashed (see CreateChargeOnce); nil for charges written
	// with their idempotency record in the same transaction, which need
	// none, and for a charge whose key expired and went to a newer charge.
	// Its unique index is what keeps a lost record from charging twice.
	RequestKey *string `gorm:"size:80;uniqueIndex"`
	// KeyExpires is when the idempotency record of RequestKey expires at
	// the earliest (RowKey.Expires); nil with RequestKey nil, and on rows
	// written before the column, whose Created stands in for it.
	KeyExpires *time.Time
	// Answer is the body of the first answer to the request that made the
	// charge (see FirstAnswer), written with the row; nil on rows written
	// before the column.
	Answer []byte
}

// Refund returns part or all of a charge.
type Refund struct {
	ID      string    `gorm:"primaryKey;size:40"`
	Account string    `gorm:"size:200;not null;index"`
	Charge  string    `gorm:"size:40;not null;index"`
	Amount  int64     `gorm:"not null"`
	Status  string    `gorm:"size:20;not null;index"` // as Charge's
	Created time.Time `gorm:"not null"`
	// RequestKey, KeyExpires and Answer are as Charge's (see
	// CreateRefundOnce).
	RequestKey *string `gorm:"size:80;uniqueIndex"`
	KeyExpires *time.Time
	Answer     []byte
}

// Balance sums an account's money movements, and what the provider has
// settled of them.
type Balance struct {
	Charged  int64 `json:"charged"`
	Refunded int64 `json:"refunded"`
	Charges  int64 `json:"charges"`
	Refunds  int64 `json:"refunds"`
	// Settled is the settled balance: the settled charges' money less the
	// settled refunds'. SettledCharged and SettledRefunded are its two
	// sides, and Settlements counts the ledger entries: once every event
	// is applied, the sides equal Charged and Refunded, and Settlements
	// Charges plus Refunds.
	Settled         int64 `json:"settled"`
	SettledCharged  int64 `json:"settled_charged"`
	SettledRefunded int64 `json:"settled_refunded"`
	Settlements     int64 `json:"settlements"`
}

// Errors the API layer turns into problems.
var (
	ErrInvalid      = errors.New("invalid request")
	ErrDeclined     = errors.New("card declined")
	ErrProviderDown = errors.New("payment provider unavailable")
	ErrNotFound     = errors.New("not found")
	ErrOverRefund   = errors.New("refund exceeds the charge's unrefunded amount")
	// ErrLeaseLost: the request lost its hold on its idempotency key
	// while it ran, so another attempt may be charging now; this one
	// writes nothing.
	ErrLeaseLost = errors.New("the request lost its idempotency key while it ran; nothing was written")
)

// DeclinedCustomer is the customer whose card is always declined.
const DeclinedCustomer = "cus_declined"

// Migrate creates the demo's tables. On MySQL and MariaDB they are made
// utf8mb4 with a binary collation, whatever the server's defaults: a
// server default of latin1 refuses most non-Latin text, and a
// case-insensitive collation would let account "ACCT_1" read the charges
// of "acct_1". Tables created earlier keep their options, and get the
// columns and indexes added since (request_key and key_expires, with
// request_key's unique index, answer, the index on status, and the
// charges' seq,
// see migrateSeq, and the unique index on the settlements' object, see
// settledTwice); the tables key_uses (KeyUse) and settlements
// (Settlement) are created where they are missing.
func Migrate(ctx context.Context, db *gorm.DB) error {
	db = db.WithContext(ctx)
	if err := settledTwice(db); err != nil {
		return err
	}
	if db.Dialector.Name() == "mysql" {
		db = db.Set("gorm:table_options", "DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin")
	}
	if err := db.AutoMigrate(&Charge{}, &Refund{}, &KeyUse{}, &Settlement{}); err != nil {
		return err
	}
	return migrateSeq(db)
}

// settledTwice reports the charges and refunds that a ledger from before
// the unique index on Settlement.Object settled more than once: the index
// cannot be made over them, and an operator must first decide which
// entries to keep.
func settledTwice(db *gorm.DB) error {
	m := db.Migrator()
	if !m.HasTable(&Settlement{}) || m.HasIndex(&Settlement{}, "Object") {
		return nil
	}
	var twice []string
	if err := db.Model(&Settlement{}).Group("object").Having("COUNT(*) > 1").Order("object").Limit(5).Pluck("object", &twice).Error; err != nil {
		return err
	}
	if len(twice) > 0 {
		return fmt.Errorf("the ledger settles some charges or refunds more than once (%s): keep the first entry of each (the lowest id) and delete the others, then start again; from now on the ledger refuses a second entry",
			strings.Join(twice, ", "))
	}
	return nil
}

// CreateCharge authorizes the payment with the provider, then records the
// charge in tx. The provider is called before tx is used, so no database
// transaction stays open while the provider takes its time.
//
// Everything that could keep the charge from being written is checked
// before the provider is asked for money: a charge the database would
// refuse fails with ErrInvalid, having taken nothing. requestKey names the
// request's idempotency key (its scope and key, hashed), the same for
// every attempt of it; the provider gets the key of its current use
// (useKey, the uses read from db), so that if an attempt fails after the
// provider took the money (the database failed, the answer was lost, the
// lease on the request's idempotency key was lost), the next attempt gets
// the provider's first authorization back instead of taking the money
// again, while the key's next use, once its record expired, is a payment
// of its own. The use is counted in tx, with the charge or, for a declined
// card, alone: tx commits with the recorded response.
//
// ctx is the request's context. If it is cancelled with cause
// idem.ErrLeaseLost (another attempt may now hold the request's key),
// nothing is written and the error wraps ErrLeaseLost.
func CreateCharge(ctx context.Context, db *gorm.DB, tx func() (*gorm.DB, error), p Authorizer, account, requestKey string, r ChargeRequest, now time.Time) (Charge, error) {
	if err := ValidAccount(account); err != nil {
		return Charge{}, err
	}
	if err := r.Validate(); err != nil {
		return Charge{}, err
	}
	if requestKey == "" {
		return Charge{}, errors.New("no idempotency key for the payment provider")
	}
	uses, err := keyUses(db.WithContext(ctx), requestKey)
	if err != nil {
		return Charge{}, err
	}
	err = p.Authorize(ctx, Authorization{IdempotencyKey: useKey(requestKey, uses), Account: account, Customer: r.Customer, Amount: r.Amount, Currency: r.Currency})
	if leaseLost(ctx) {
		return Charge{}, fmt.Errorf("%w: %w", ErrLeaseLost, context.Cause(ctx))
	}
	declined := errors.Is(err, ErrDeclined)
	if err != nil && !declined {
		return Charge{}, err
	}
	txdb, err := tx()
	if err != nil {
		return Charge{}, err
	}
	// Checked again once the transaction is ours (BEGIN may have waited for
	// the database's writer). The lease may still go between here and the
	// commit; then the store's completion, fenced by the owner token, fails
	// and rolls this write back.
	if leaseLost(ctx) {
		return Charge{}, fmt.Errorf("%w: %w", ErrLeaseLost, context.Cause(ctx))
	}
	// The transaction's own context, not the request's: a write that has
	// begun is finished and committed with the stored response, for the
	// client's retry to find. Cancelling it midway would gain nothing, and on
	// SQLite the driver's late interrupt can hit the next statement on the
	// connection (the completion), failing it after the 201 was written.
	if err := countUse(txdb, requestKey, uses); err != nil {
		return Charge{}, err
	}
	if declined {
		return Charge{}, ErrDeclined
	}
	c := Charge{
		ID: newID("ch_"), Account: account, Amount: r.Amount, Currency: r.Currency,
		Customer: r.Customer, Description: r.Description, Status: StatusSucceeded, Created: now.UTC().Truncate(time.Second),
	}
	c.Answer = render(c.View())
	if err := txdb.Create(&c).Error; err != nil {
		return Charge{}, err
	}
	return c, nil
}

// leaseLost reports whether ctx was cancelled because the request lost its
// idempotency key.
func leaseLost(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), idem.ErrLeaseLost)
}

// RefundRequest is the body of POST /v1/refunds.
type RefundRequest struct {
	Charge string `json:"charge"`
	Amount int64  `json:"amount"`
}

// CreateRefund refunds part of a charge of account. The charge's refunded
// total moves in one conditional UPDATE, so two concurrent refunds can never
// together exceed the charge.
//
// ctx is the request's context: cancelled with cause idem.ErrLeaseLost,
// nothing is written and the error wraps ErrLeaseLost.
func CreateRefund(ctx context.Context, tx func() (*gorm.DB, error), account string, r RefundRequest, now time.Time) (Refund, error) {
	return createRefund(ctx, tx, account, r, now, nil)
}

// createRefund is CreateRefund, writing the refund's row under key if it
// is not nil.
func createRefund(ctx context.Context, tx func() (*gorm.DB, error), account string, r RefundRequest, now time.Time, key *RowKey) (Refund, error) {
	if err := ValidAccount(account); err != nil {
		return Refund{}, err
	}
	var problems []FieldError
	if r.Charge == "" {
		problems = append(problems, FieldError{Pointer: "#/charge", Detail: "must be the id of one of the account's charges"})
	}
	if r.Amount <= 0 {
		problems = append(problems, FieldError{Pointer: "#/amount", Detail: "must be a positive integer number of cents"})
	}
	if problems != nil {
		return Refund{}, Invalid(problems...)
	}
	if !storable(r.Charge, idSize) {
		return Refund{}, ErrNotFound // no charge has such an id, and the database may not take it
	}
	db, err := tx()
	if err != nil {
		return Refund{}, err
	}
	if leaseLost(ctx) {
		return Refund{}, fmt.Errorf("%w: %w", ErrLeaseLost, context.Cause(ctx))
	}
	// The transaction's own context, as in CreateCharge.
	res := db.Model(&Charge{}).
		Where("id = ? AND account = ? AND amount - refunded >= ?", r.Charge, account, r.Amount).
		Update("refunded", gorm.Expr("refunded + ?", r.Amount))
	if res.Error != nil {
		return Refund{}, res.Error
	}
	if res.RowsAffected == 0 {
		var n int64
		if err := db.Model(&Charge{}).Where("id = ? AND account = ?", r.Charge, account).Count(&n).Error; err != nil {
			return Refund{}, err
		}
		if n == 0 {
			return Refund{}, ErrNotFound
		}
		return Refund{}, ErrOverRefund
	}
	ref := Refund{ID: newID("re_"), Account: account, Charge: r.Charge, Amount: r.Amount, Status: StatusSucceeded,
		Created: now.UTC().Truncate(time.Second)}
	if key != nil {
		ref.RequestKey, ref.KeyExpires = key.columns()
	}
	ref.Answer = render(ref.View())
	if err := db.Create(&ref).Error; err != nil {
		return Refund{}, err
	}
	return ref, nil
}

// GetCharge returns account's charge id, or ErrNotFound (also for another
// account's charge, which must not be distinguishable from a missing one).
func GetCharge(ctx context.Context, db *gorm.DB, account, id string) (Charge, error) {
	if err := ValidAccount(account); err != nil {
		return Charge{}, err
	}
	if !storable(id, idSize) {
		return Charge{}, ErrNotFound
	}
	var c Charge
	err := db.WithContext(ctx).Where("id = ? AND account = ?", id, account).Take(&c).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Charge{}, ErrNotFound
	}
	return c, err
}

// ListCharges returns up to limit of account's charges, newest first (in
// the order the database took them, Charge.Seq), and whether more follow. With
// startingAfter, the id of one of account's charges, it returns the
// charges that come after that one in this order: a client pages through
// every charge by passing the last id of each page.
func ListCharges(ctx context.Context, db *gorm.DB, account string, limit int, startingAfter string) ([]Charge, bool, error) {
	charges := []Charge{}
	if err := ValidAccount(account); err != nil {
		return charges, false, err
	}
	q := db.WithContext(ctx).Where("account = ?", account)
	if startingAfter != "" {
		cursor, err := GetCharge(ctx, db, account, startingAfter)
		if errors.Is(err, ErrNotFound) {
			return charges, false, Invalid(FieldError{Parameter: "starting_after", Detail: "must be the id of one of the account's charges"})
		}
		if err != nil {
			return charges, false, err
		}
		q = q.Where("seq < ?", cursor.Seq)
	}
	err := q.Omit("answer").Order("seq DESC").Limit(limit + 1).Find(&charges).Error
	if more := len(charges) > limit; more {
		return charges[:limit], true, err
	}
	return charges, false, err
}

// GetBalance sums account's charges, refunds and settlements in one
// statement, so that every sum is read from one snapshot of the database:
// two statements would let a charge and its refund commit between them,
// and the refunds counted could then exceed the charges counted.
func GetBalance(ctx context.Context, db *gorm.DB, account string) (Balance, error) {
	var b Balance
	if err := ValidAccount(account); err != nil {
		return b, err
	}
	db = db.WithContext(ctx)
	of := func(model any, expr string) *gorm.DB {
		return db.Session(&gorm.Session{NewDB: true}).Model(model).Where("account = ?", account).Select(expr)
	}
	settled := func(kind string) *gorm.DB {
		return of(&Settlement{}, "COALESCE(SUM(amount), 0)").Where("type = ?", kind)
	}
	err := db.Raw("SELECT (?) AS charged, (?) AS charges, (?) AS refunded, (?) AS refunds, (?) AS settled_charged, (?) AS settled_refunded, (?) AS settlements",
		of(&Charge{}, "COALESCE(SUM(amount), 0)"), of(&Charge{}, "COUNT(*)"),
		of(&Refund{}, "COALESCE(SUM(amount), 0)"), of(&Refund{}, "COUNT(*)"),
		settled(ChargeSettled), settled(RefundSettled), of(&Settlement{}, "COUNT(*)"),
	).Scan(&b).Error
	b.Settled = b.SettledCharged - b.SettledRefunded
	return b, err
}

// newID returns prefix and 26 random base-32 characters (130 bits).
func newID(prefix string) string { return prefix + rand.Text() }
