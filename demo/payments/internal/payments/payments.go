// Package payments is the demo's business logic: charges, refunds and
// balances per account, stored with GORM. It knows nothing about HTTP or
// idempotency; the API layer decides which transaction it writes in.
package payments

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Charge is a payment taken from a customer.
type Charge struct {
	ID          string    `gorm:"primaryKey;size:40"`
	Account     string    `gorm:"size:200;not null;index:idx_charges_account_created,priority:1"`
	Amount      int64     `gorm:"not null"`
	Refunded    int64     `gorm:"not null;default:0"`
	Currency    string    `gorm:"size:3;not null"`
	Customer    string    `gorm:"size:200;not null"`
	Description string    `gorm:"size:1000;not null;default:''"`
	Status      string    `gorm:"size:20;not null"`
	Created     time.Time `gorm:"not null;index:idx_charges_account_created,priority:2"`
}

// Refund returns part or all of a charge.
type Refund struct {
	ID      string    `gorm:"primaryKey;size:40"`
	Account string    `gorm:"size:200;not null;index"`
	Charge  string    `gorm:"size:40;not null;index"`
	Amount  int64     `gorm:"not null"`
	Status  string    `gorm:"size:20;not null"`
	Created time.Time `gorm:"not null"`
}

// Balance sums an account's money movements.
type Balance struct {
	Charged  int64 `json:"charged"`
	Refunded int64 `json:"refunded"`
	Charges  int64 `json:"charges"`
	Refunds  int64 `json:"refunds"`
}

// Errors the API layer turns into problems.
var (
	ErrInvalid      = errors.New("invalid request")
	ErrDeclined     = errors.New("card declined")
	ErrProviderDown = errors.New("payment provider unavailable")
	ErrNotFound     = errors.New("not found")
	ErrOverRefund   = errors.New("refund exceeds the charge's unrefunded amount")
)

// DeclinedCustomer is the customer whose card is always declined.
const DeclinedCustomer = "cus_declined"

// Migrate creates the demo's tables.
func Migrate(ctx context.Context, db *gorm.DB) error {
	return db.WithContext(ctx).AutoMigrate(&Charge{}, &Refund{})
}

// ChargeRequest is the body of POST /v1/charges.
type ChargeRequest struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Customer    string `json:"customer"`
	Description string `json:"description"`
}

// Validate reports the first problem with r, wrapped in ErrInvalid.
func (r *ChargeRequest) Validate() error {
	switch {
	case r.Amount <= 0:
		return fmt.Errorf("%w: amount must be a positive integer number of cents", ErrInvalid)
	case !isCurrency(r.Currency):
		return fmt.Errorf("%w: currency must be three lowercase letters", ErrInvalid)
	case strings.TrimSpace(r.Customer) == "" || len(r.Customer) > 200:
		return fmt.Errorf("%w: customer must be a non-empty string of at most 200 bytes", ErrInvalid)
	case len(r.Description) > 1000:
		return fmt.Errorf("%w: description must be at most 1000 bytes", ErrInvalid)
	}
	return nil
}

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := range 3 {
		if s[i] < 'a' || s[i] > 'z' {
			return false
		}
	}
	return true
}

// CreateCharge authorizes the payment with the provider, then records the
// charge in tx. The provider is called before tx is used, so no database
// transaction stays open while the provider takes its time.
func CreateCharge(ctx context.Context, tx func() (*gorm.DB, error), p Authorizer, account string, r ChargeRequest, now time.Time) (Charge, error) {
	if err := r.Validate(); err != nil {
		return Charge{}, err
	}
	if err := p.Authorize(ctx, Authorization{Account: account, Customer: r.Customer, Amount: r.Amount, Currency: r.Currency}); err != nil {
		return Charge{}, err
	}
	db, err := tx()
	if err != nil {
		return Charge{}, err
	}
	c := Charge{
		ID: newID("ch_"), Account: account, Amount: r.Amount, Currency: r.Currency,
		Customer: r.Customer, Description: r.Description, Status: "succeeded", Created: now.UTC().Truncate(time.Second),
	}
	// The transaction's own context, not the request's: a write that has
	// begun is finished and committed with the stored response, for the
	// client's retry to find. Cancelling it midway would gain nothing, and on
	// SQLite the driver's late interrupt can hit the next statement on the
	// connection (the completion), failing it after the 201 was written.
	if err := db.Create(&c).Error; err != nil {
		return Charge{}, err
	}
	return c, nil
}

// RefundRequest is the body of POST /v1/refunds.
type RefundRequest struct {
	Charge string `json:"charge"`
	Amount int64  `json:"amount"`
}

// CreateRefund refunds part of a charge of account. The charge's refunded
// total moves in one conditional UPDATE, so two concurrent refunds can never
// together exceed the charge.
func CreateRefund(_ context.Context, tx func() (*gorm.DB, error), account string, r RefundRequest, now time.Time) (Refund, error) {
	if r.Charge == "" || r.Amount <= 0 {
		return Refund{}, fmt.Errorf("%w: charge must be a charge id and amount a positive integer", ErrInvalid)
	}
	db, err := tx()
	if err != nil {
		return Refund{}, err
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
	ref := Refund{ID: newID("re_"), Account: account, Charge: r.Charge, Amount: r.Amount, Status: "succeeded",
		Created: now.UTC().Truncate(time.Second)}
	if err := db.Create(&ref).Error; err != nil {
		return Refund{}, err
	}
	return ref, nil
}

// GetCharge returns account's charge id, or ErrNotFound (also for another
// account's charge, which must not be distinguishable from a missing one).
func GetCharge(ctx context.Context, db *gorm.DB, account, id string) (Charge, error) {
	var c Charge
	err := db.WithContext(ctx).Where("id = ? AND account = ?", id, account).Take(&c).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Charge{}, ErrNotFound
	}
	return c, err
}

// ListCharges returns account's most recent charges, newest first.
func ListCharges(ctx context.Context, db *gorm.DB, account string, limit int) ([]Charge, error) {
	charges := []Charge{}
	err := db.WithContext(ctx).Where("account = ?", account).Order("created DESC, id DESC").Limit(limit).Find(&charges).Error
	return charges, err
}

// GetBalance sums account's charges and refunds.
func GetBalance(ctx context.Context, db *gorm.DB, account string) (Balance, error) {
	var b Balance
	db = db.WithContext(ctx)
	err := db.Model(&Charge{}).Where("account = ?", account).
		Select("COALESCE(SUM(amount), 0) AS charged, COUNT(*) AS charges").Scan(&b).Error
	if err != nil {
		return b, err
	}
	var r struct{ Refunded, Refunds int64 }
	err = db.Model(&Refund{}).Where("account = ?", account).
		Select("COALESCE(SUM(amount), 0) AS refunded, COUNT(*) AS refunds").Scan(&r).Error
	b.Refunded, b.Refunds = r.Refunded, r.Refunds
	return b, err
}

// newID returns prefix and 26 random base-32 characters (130 bits).
func newID(prefix string) string { return prefix + rand.Text() }
