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
//
// A record that expires is not lost: the policy makes its key new again.
// So each row also carries when its key's record expires at the earliest,
// and only a row whose key has not expired answers for it. A key that
// comes back after that makes a new row, which takes the key over from the
// old one in the transaction that writes it.

// RowKey is the key a row is written under, and the time it is written.
type RowKey struct {
	// Key is the hash of the request's scope and idempotency key; the
	// payment provider's idempotency key is that of its current use
	// (useKey).
	Key string
	// Now is the time on the idempotency Engine's clock, and TTL the
	// Engine's: a record completed at Now expires at Now + TTL, and the
	// record of a request that wrote a row at Now completes later still.
	Now time.Time
	TTL time.Duration
}

// Expires is when the record of a request that writes its row at k.Now
// expires at the earliest. The record completes after the row is written
// (within the rest of the request, well under a lease): until Expires its
// key is certainly live, and a retry that finds no record then has lost
// it; from Expires on, a retry is taken for a new request, as it would be
// moments later anyway.
func (k RowKey) Expires() time.Time { return k.Now.Add(k.TTL) }

// columns returns the values of a row's RequestKey and KeyExpires. The
// time is cut to milliseconds, which every database keeps exactly (MySQL's
// DATETIME(3) would round a finer time, possibly up).
func (k RowKey) columns() (*string, *time.Time) {
	key, expires := k.Key, k.Expires().UTC().Truncate(time.Millisecond)
	return &key, &expires
}

// live reports whether a row written under k.Key, whose key expires at
// expires (nil on rows from before the column: created and the TTL), still
// answers for the key at k.Now.
func (k RowKey) live(expires *time.Time, created time.Time) bool {
	at := created.Add(k.TTL)
	if expires != nil {
		at = *expires
	}
	return k.Now.Before(at)
}

// retireKey takes key off model's row id, if it still carries it: the key
// expired there, and the row written under it next takes it over.
func retireKey(tx *gorm.DB, model any, id, key string) error {
	return tx.Model(model).Where("id = ? AND request_key = ?", id, key).Update("request_key", nil).Error
}

// CreateChargeOnce is CreateCharge for records kept outside db: the charge
// is written without waiting for a record to commit with it (with the
// body of its first answer, Charge.FirstAnswer), carrying k.Key, the hash of the request's scope and idempotency key, and the
// provider gets the key of k.Key's current use, as with CreateCharge; the
// use is counted with the charge. If a charge under k.Key exists
// whose key has not expired, from an attempt whose record was lost or
// whose lease was taken over, it is returned, and no second charge is
// written, whichever attempt reaches the database first: existing is then
// true. Such a charge with another body fails with ErrKeyReused. A charge
// under an expired key is history: a new charge is made, and takes the key
// over.
func CreateChargeOnce(ctx context.Context, db *gorm.DB, p Authorizer, account string, k RowKey, r ChargeRequest) (c Charge, existing bool, err error) {
	if err := ValidAccount(account); err != nil {
		return Charge{}, false, err
	}
	if err := r.Validate(); err != nil {
		return Charge{}, false, err
	}
	if k.Key == "" {
		return Charge{}, false, errors.New("no idempotency key to write the charge under")
	}
	db = db.WithContext(context.WithoutCancel(ctx))
	// The key's uses are read before its charge is looked up. A charge
	// and the use it counts commit together, so an attempt that reads no
	// charge read the uses from before that charge too, and asks the
	// provider under the same key as the attempt that wrote it: the
	// provider answers it without taking the money again. Read the other
	// way round, another attempt could commit in between, and this one
	// would ask under the next use's key and be charged a second time.
	uses, err := keyUses(db, k.Key)
	if err != nil {
		return Charge{}, false, err
	}
	// Found before the provider is asked, so that a charge made once is
	// answered without asking again.
	prev, live, err := chargeByKey(db, account, k, r)
	if live || err != nil {
		return prev, live, err
	}
	err = p.Authorize(ctx, Authorization{IdempotencyKey: useKey(k.Key, uses), Account: account, Customer: r.Customer, Amount: r.Amount, Currency: r.Currency})
	if leaseLost(ctx) {
		return Charge{}, false, fmt.Errorf("%w: %w", ErrLeaseLost, context.Cause(ctx))
	}
	if errors.Is(err, ErrDeclined) {
		// Counted, so that the key's next use asks the provider anew. An
		// attempt that counted it first met the same decline.
		if err := countUse(db, k.Key, uses); err != nil && !errors.Is(err, errUseTaken) {
			return Charge{}, false, err
		}
		return Charge{}, false, ErrDeclined
	}
	if err != nil {
		return Charge{}, false, err
	}
	c = Charge{
		ID: newID("ch_"), Account: account, Amount: r.Amount, Currency: r.Currency,
		Customer: r.Customer, Description: r.Description, Status: StatusSucceeded, Created: k.Now.UTC().Truncate(time.Second),
	}
	c.RequestKey, c.KeyExpires = k.columns()
	c.Answer = render(c.View())
	err = db.Transaction(func(tx *gorm.DB) error {
		if prev.ID != "" {
			if err := retireKey(tx, &Charge{}, prev.ID, k.Key); err != nil {
				return err
			}
		}
		if err := tx.Create(&c).Error; err != nil {
			return err
		}
		return countUse(tx, k.Key, uses)
	})
	if err != nil {
		// Another attempt of this request wrote its charge first: the
		// unique index refused this one. Whatever the driver calls that
		// error, the charge under the key is the answer.
		if c, live, ferr := chargeByKey(db, account, k, r); live || ferr != nil {
			return c, live, ferr
		}
		return Charge{}, false, err
	}
	return c, false, nil
}

// chargeByKey finds the charge written under k.Key. live reports that one
// exists whose key has not expired, and that it records r; one that
// records another request is ErrKeyReused. A charge whose key expired is
// returned with live false.
func chargeByKey(db *gorm.DB, account string, k RowKey, r ChargeRequest) (c Charge, live bool, err error) {
	err = db.Where("request_key = ?", k.Key).Take(&c).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return Charge{}, false, nil
	case err != nil:
		return Charge{}, false, err
	case !k.live(c.KeyExpires, c.Created):
		return c, false, nil
	case c.Account != account || c.Amount != r.Amount || c.Currency != r.Currency || c.Customer != r.Customer || c.Description != r.Description:
		return Charge{}, false, ErrKeyReused
	}
	return c, true, nil
}

// CreateRefundOnce is CreateRefund for records kept outside db, as
// CreateChargeOnce is for charges: the refund and the charge's refunded
// total commit in a transaction of the function's own, the refund carrying
// k.Key under its unique index. A refund under k.Key whose key has not
// expired is returned (existing true), whether it is found before the
// transaction or the transaction fails because another attempt wrote it
// meanwhile (the unique index, or the charge's room already taken by that
// refund). A refund under an expired key is history: a new refund is
// made, and takes the key over.
func CreateRefundOnce(ctx context.Context, db *gorm.DB, account string, k RowKey, r RefundRequest) (ref Refund, existing bool, err error) {
	if err := ValidAccount(account); err != nil {
		return Refund{}, false, err
	}
	if k.Key == "" {
		return Refund{}, false, errors.New("no idempotency key to write the refund under")
	}
	db = db.WithContext(context.WithoutCancel(ctx))
	prev, live, err := refundByKey(db, account, k, r)
	if live || err != nil {
		return prev, live, err
	}
	err = db.Transaction(func(tx *gorm.DB) error {
		if prev.ID != "" {
			if err := retireKey(tx, &Refund{}, prev.ID, k.Key); err != nil {
				return err
			}
		}
		var err error
		ref, err = createRefund(ctx, func() (*gorm.DB, error) { return tx, nil }, account, r, k.Now, &k)
		return err
	})
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			return Refund{}, false, err
		}
		if ref, live, ferr := refundByKey(db, account, k, r); live || ferr != nil {
			return ref, live, ferr
		}
		return Refund{}, false, err
	}
	return ref, false, nil
}

// refundByKey is chargeByKey for refunds.
func refundByKey(db *gorm.DB, account string, k RowKey, r RefundRequest) (ref Refund, live bool, err error) {
	err = db.Where("request_key = ?", k.Key).Take(&ref).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return Refund{}, false, nil
	case err != nil:
		return Refund{}, false, err
	case !k.live(ref.KeyExpires, ref.Created):
		return ref, false, nil
	case ref.Account != account || ref.Charge != r.Charge || ref.Amount != r.Amount:
		return Refund{}, false, ErrKeyReused
	}
	return ref, true, nil
}
