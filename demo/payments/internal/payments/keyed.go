package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// ErrKeyReused: a row written under the request's idempotency key records
// another request (other amount, currency, customer, description, charge).
// It happens only when the key's idempotency record was lost and the key
// then came back with another body; with the record, idemkit answers 422
// before the handler runs.
var ErrKeyReused = errors.New("the idempotency key was already used for another request")

// When the idempotency records live apart from the business rows (in
// Redis), no transaction joins a row to the record that replays its
// response, and the store can lose a record it acknowledged. A retry of
// such a key runs its handler again. The functions here make that retry
// harmless: every row carries the request's scoped idempotency key under a
// unique index, so the database itself refuses a second row for one key,
// and the retry is answered with the row that exists.

// CreateChargeOnce is CreateCharge for records kept outside db: the charge
// is written on its own (no transaction waits for a record to commit with
// it), carrying requestKey, the hash of the request's scope and
// idempotency key, which is also the provider's idempotency key. If a
// charge with requestKey exists, from an attempt whose record was lost or
// whose lease was taken over, it is returned, and no second charge is
// written, whichever attempt reaches the database first: existing is then
// true. A charge under requestKey with another body fails with
// ErrKeyReused.
func CreateChargeOnce(ctx context.Context, db *gorm.DB, p Authorizer, account, requestKey string, r ChargeRequest, now time.Time) (c Charge, existing bool, err error) {
	if err := ValidAccount(account); err != nil {
		return Charge{}, false, err
	}
	if err := r.Validate(); err != nil {
		return Charge{}, false, err
	}
	if requestKey == "" {
		return Charge{}, false, errors.New("no idempotency key to write the charge under")
	}
	db = db.WithContext(context.WithoutCancel(ctx))
	// Found first, so that a charge made once is answered without asking
	// the provider again.
	if c, ok, err := chargeByKey(db, account, requestKey, r); ok || err != nil {
		return c, ok, err
	}
	err = p.Authorize(ctx, Authorization{IdempotencyKey: requestKey, Account: account, Customer: r.Customer, Amount: r.Amount, Currency: r.Currency})
	if leaseLost(ctx) {
		return Charge{}, false, fmt.Errorf("%w: %w", ErrLeaseLost, context.Cause(ctx))
	}
	if err != nil {
		return Charge{}, false, err
	}
	key := requestKey
	c = Charge{
		ID: newID("ch_"), Account: account, Amount: r.Amount, Currency: r.Currency,
		Customer: r.Customer, Description: r.Description, Status: "succeeded", Created: now.UTC().Truncate(time.Second),
		RequestKey: &key,
	}
	if err := db.Create(&c).Error; err != nil {
		// Another attempt of this request wrote its charge first: the
		// unique index refused this one. Whatever the driver calls that
		// error, the charge under the key is the answer.
		if c, ok, ferr := chargeByKey(db, account, requestKey, r); ok || ferr != nil {
			return c, ok, ferr
		}
		return Charge{}, false, err
	}
	return c, false, nil
}

// chargeByKey finds the charge written under requestKey. ok reports that
// one exists and records r; one that records another request is
// ErrKeyReused.
func chargeByKey(db *gorm.DB, account, requestKey string, r ChargeRequest) (c Charge, ok bool, err error) {
	err = db.Where("request_key = ?", requestKey).Take(&c).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return Charge{}, false, nil
	case err != nil:
		return Charge{}, false, err
	case c.Account != account || c.Amount != r.Amount || c.Currency != r.Currency || c.Customer != r.Customer || c.Description != r.Description:
		return Charge{}, false, ErrKeyReused
	}
	return c, true, nil
}

// CreateRefundOnce is CreateRefund for records kept outside db, as
// CreateChargeOnce is for charges: the refund and the charge's refunded
// total commit in a transaction of the function's own, the refund carrying
// requestKey under its unique index. A refund under requestKey that exists
// is returned (existing true), whether it is found before the transaction
// or the transaction fails because another attempt wrote it meanwhile (the
// unique index, or the charge's room already taken by that refund).
func CreateRefundOnce(ctx context.Context, db *gorm.DB, account, requestKey string, r RefundRequest, now time.Time) (ref Refund, existing bool, err error) {
	if err := ValidAccount(account); err != nil {
		return Refund{}, false, err
	}
	if requestKey == "" {
		return Refund{}, false, errors.New("no idempotency key to write the refund under")
	}
	db = db.WithContext(context.WithoutCancel(ctx))
	if ref, ok, err := refundByKey(db, account, requestKey, r); ok || err != nil {
		return ref, ok, err
	}
	err = db.Transaction(func(tx *gorm.DB) error {
		var err error
		key := requestKey
		ref, err = createRefund(ctx, func() (*gorm.DB, error) { return tx, nil }, account, r, now, &key)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			return Refund{}, false, err
		}
		if ref, ok, ferr := refundByKey(db, account, requestKey, r); ok || ferr != nil {
			return ref, ok, ferr
		}
		return Refund{}, false, err
	}
	return ref, false, nil
}

// refundByKey is chargeByKey for refunds.
func refundByKey(db *gorm.DB, account, requestKey string, r RefundRequest) (ref Refund, ok bool, err error) {
	err = db.Where("request_key = ?", requestKey).Take(&ref).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return Refund{}, false, nil
	case err != nil:
		return Refund{}, false, err
	case ref.Account != account || ref.Charge != r.Charge || ref.Amount != r.Amount:
		return Refund{}, false, ErrKeyReused
	}
	return ref, true, nil
}
