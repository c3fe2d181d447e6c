package payments

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
)

// barrier is an Authorizer that lets no call through until n calls are
// waiting, so that n attempts of one charge all find no charge under their
// key before any of them writes one. It then authorizes through the
// simulated provider.
type barrier struct {
	n        int
	provider *Provider
	mu       sync.Mutex
	waiting  int
	open     chan struct{}
}

func (b *barrier) Authorize(ctx context.Context, a Authorization) error {
	b.mu.Lock()
	b.waiting++
	if b.waiting == b.n {
		close(b.open)
	}
	b.mu.Unlock()
	select {
	case <-b.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return b.provider.Authorize(ctx, a)
}

// key is a RowKey written now, whose records are kept an hour.
func key(k string) RowKey { return RowKey{Key: k, Now: time.Now(), TTL: time.Hour} }

func countRows(t *testing.T, db *gorm.DB, model any, account string) int64 {
	t.Helper()
	var n int64
	if err := db.Model(model).Where("account = ?", account).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

// chargeAtOnce runs n attempts of one charge at once, all past the lookup
// of their key before any writes (a barrier in front of provider), and
// checks that they are answered with one charge of r, which one of them
// wrote. It returns the charge's id.
func chargeAtOnce(t *testing.T, db *gorm.DB, provider *Provider, n int, account string, k RowKey, r ChargeRequest) string {
	t.Helper()
	b := &barrier{n: n, provider: provider, open: make(chan struct{})}
	type result struct {
		c        Charge
		existing bool
		err      error
	}
	results := make(chan result, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			c, existing, err := CreateChargeOnce(t.Context(), db, b, account, k, r)
			results <- result{c, existing, err}
		})
	}
	wg.Wait()
	close(results)
	var id string
	fresh := 0
	for res := range results {
		if res.err != nil {
			t.Fatalf("attempt: %v", res.err)
		}
		if id == "" {
			id = res.c.ID
		}
		if res.c.ID != id || res.c.Amount != r.Amount {
			t.Fatalf("attempts answered with charges %s and %s (%d): want one charge of %d", id, res.c.ID, res.c.Amount, r.Amount)
		}
		if !res.existing {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d attempts wrote a charge, want 1", fresh)
	}
	return id
}

// TestChargeOnceUnderOneKey: attempts of one charge whose idempotency
// record was lost, one after the other or all at once, write one charge
// and are all answered with it; the provider takes the money once.
func TestChargeOnceUnderOneKey(t *testing.T) {
	const attempts = 4
	for name, db := range testDBs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			acct := "acct_" + rand.Text()[:10]
			req := ChargeRequest{Amount: 700, Currency: "usd", Customer: "cus_1", Description: "once"}
			provider := &Provider{}

			chargeAtOnce(t, db, provider, attempts, acct, key("k-together"), req)

			// One after the other: the second finds the first's charge
			// before asking the provider.
			first, existing, err := CreateChargeOnce(ctx, db, provider, acct, key("k-sequential"), req)
			if err != nil || existing {
				t.Fatalf("first attempt: existing %v, %v", existing, err)
			}
			again, existing, err := CreateChargeOnce(ctx, db, provider, acct, key("k-sequential"), req)
			if err != nil || !existing || again.ID != first.ID {
				t.Fatalf("retry: %s existing %v (%v), want %s", again.ID, existing, err, first.ID)
			}
			if n := countRows(t, db, &Charge{}, acct); n != 2 {
				t.Fatalf("%d charges written for two keys", n)
			}
			if c := provider.Counts(acct); c.Authorizations != 2 || c.Calls != attempts+1 {
				t.Fatalf("provider %+v, want 2 authorizations in %d calls", c, attempts+1)
			}

			// The key with another charge: refused, nothing written.
			other := req
			other.Amount++
			if _, _, err := CreateChargeOnce(ctx, db, provider, acct, key("k-sequential"), other); !errors.Is(err, ErrKeyReused) {
				t.Fatalf("the key with another amount: %v, want ErrKeyReused", err)
			}
			if _, _, err := CreateChargeOnce(ctx, db, provider, acct+"x", key("k-sequential"), req); !errors.Is(err, ErrKeyReused) {
				t.Fatalf("the key from another account: %v, want ErrKeyReused", err)
			}
			if n := countRows(t, db, &Charge{}, acct); n != 2 {
				t.Fatalf("%d charges after the refused attempts, want 2", n)
			}
		})
	}
}

// TestRefundOnceUnderOneKey: a refund retried after its record was lost is
// answered with the refund written, and the charge is refunded once.
func TestRefundOnceUnderOneKey(t *testing.T) {
	for name, db := range testDBs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			acct := "acct_" + rand.Text()[:10]
			c, _, err := CreateChargeOnce(ctx, db, &Provider{}, acct, key("charge"), ChargeRequest{Amount: 1000, Currency: "usd", Customer: "cus_1"})
			if err != nil {
				t.Fatal(err)
			}
			req := RefundRequest{Charge: c.ID, Amount: 600}
			first, existing, err := CreateRefundOnce(ctx, db, acct, key("refund"), req)
			if err != nil || existing {
				t.Fatalf("refund: existing %v, %v", existing, err)
			}
			// 600 of 1000 is refunded: a second refund of 600 would be too
			// large, and must not be what the retry answers.
			again, existing, err := CreateRefundOnce(ctx, db, acct, key("refund"), req)
			if err != nil || !existing || again.ID != first.ID {
				t.Fatalf("retry: %s existing %v (%v), want %s", again.ID, existing, err, first.ID)
			}
			if _, _, err := CreateRefundOnce(ctx, db, acct, key("refund"), RefundRequest{Charge: c.ID, Amount: 100}); !errors.Is(err, ErrKeyReused) {
				t.Fatalf("the key with another amount: %v, want ErrKeyReused", err)
			}
			if b, err := GetBalance(ctx, db, acct); err != nil || b.Refunded != 600 || b.Refunds != 1 {
				t.Fatalf("balance %+v (%v), want one refund of 600", b, err)
			}
		})
	}
}

// TestRequestKeyIsOptional: charges and refunds written with their record
// in one transaction carry no request key, any number of them; the unique
// index holds only the keys written.
func TestRequestKeyIsOptional(t *testing.T) {
	for name, db := range testDBs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			acct := "acct_" + rand.Text()[:10]
			for i := range 3 {
				_, err := CreateCharge(ctx, db, func() (*gorm.DB, error) { return db, nil }, &Provider{}, acct, "p"+string(rune('a'+i)),
					ChargeRequest{Amount: 100, Currency: "usd", Customer: "cus_1"}, time.Now())
				if err != nil {
					t.Fatalf("charge %d without a request key: %v", i, err)
				}
			}
			if err := chargeAndRefund(ctx, db, acct, 100); err != nil {
				t.Fatal(err)
			}
			if err := chargeAndRefund(ctx, db, acct, 100); err != nil {
				t.Fatal(err)
			}
			if n := countRows(t, db, &Charge{}, acct); n != 5 {
				t.Fatalf("%d charges, want 5", n)
			}
		})
	}
}

// TestExpiredKeyIsNewAgain: a key whose record expired is a new key (the
// policy's rule), even though its row is still there: attempts of it,
// however many at once and whatever their body, write one new charge, the
// provider takes the money for it anew, and the new charge answers for the
// key until it expires in turn. Until its expiry, the old charge answered.
// Refunds likewise.
func TestExpiredKeyIsNewAgain(t *testing.T) {
	const attempts = 4
	const ttl = time.Minute
	for name, db := range testDBs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			acct, k := "acct_"+rand.Text()[:10], "k-"+rand.Text()
			t0 := time.Now()
			at := func(d time.Duration) RowKey { return RowKey{Key: k, Now: t0.Add(d), TTL: ttl} }
			req := ChargeRequest{Amount: 1000, Currency: "usd", Customer: "cus_1"}
			provider := &Provider{}

			first, existing, err := CreateChargeOnce(ctx, db, provider, acct, at(0), req)
			if err != nil || existing {
				t.Fatalf("first charge: existing %v, %v", existing, err)
			}
			if again, existing, err := CreateChargeOnce(ctx, db, provider, acct, at(ttl-time.Millisecond), req); err != nil || !existing || again.ID != first.ID {
				t.Fatalf("just before the key expired: %s existing %v (%v), want %s", again.ID, existing, err, first.ID)
			}

			// Expired: a new request under the key, with another amount,
			// its attempts all at once.
			next := req
			next.Amount = 2500
			second := chargeAtOnce(t, db, provider, attempts, acct, at(ttl), next)
			if second == first.ID {
				t.Fatalf("attempts after the key expired were answered with its old charge %s: want a new charge", first.ID)
			}
			if again, existing, err := CreateChargeOnce(ctx, db, provider, acct, at(2*ttl-time.Millisecond), next); err != nil || !existing || again.ID != second {
				t.Fatalf("the new charge's retry: %s existing %v (%v), want %s", again.ID, existing, err, second)
			}
			if n := countRows(t, db, &Charge{}, acct); n != 2 {
				t.Fatalf("%d charges, want the expired key's and the new one", n)
			}
			if c := provider.Counts(acct); c.Authorizations != 2 {
				t.Fatalf("provider %+v: want the money taken for both charges", c)
			}

			// A refund of the new charge, and the same refund again once
			// its key expired: two refunds.
			rk := RowKey{Key: "r-" + rand.Text(), Now: t0, TTL: ttl}
			refund := RefundRequest{Charge: second, Amount: 1000}
			r1, existing, err := CreateRefundOnce(ctx, db, acct, rk, refund)
			if err != nil || existing {
				t.Fatalf("refund: existing %v, %v", existing, err)
			}
			rk.Now = t0.Add(ttl)
			r2, existing, err := CreateRefundOnce(ctx, db, acct, rk, refund)
			if err != nil || existing || r2.ID == r1.ID {
				t.Fatalf("the refund's key after it expired: %s existing %v (%v), the first refund %s: want a new refund", r2.ID, existing, err, r1.ID)
			}
			if b, err := GetBalance(ctx, db, acct); err != nil || b.Refunded != 2000 || b.Refunds != 2 {
				t.Fatalf("balance %+v (%v), want two refunds of 1000", b, err)
			}

			// A key whose use was declined leaves no row; once expired, it
			// charges another customer, whom the provider, remembering the
			// decline under the key's first provider key, must charge anew.
			dk := RowKey{Key: "d-" + rand.Text(), Now: t0, TTL: ttl}
			if _, _, err := CreateChargeOnce(ctx, db, provider, acct, dk, ChargeRequest{Amount: 300, Currency: "usd", Customer: DeclinedCustomer}); !errors.Is(err, ErrDeclined) {
				t.Fatalf("the declined customer: %v, want ErrDeclined", err)
			}
			dk.Now = t0.Add(ttl)
			if c, existing, err := CreateChargeOnce(ctx, db, provider, acct, dk, req); err != nil || existing || c.Amount != req.Amount {
				t.Fatalf("the declined key once expired, for another customer: %+v existing %v (%v), want a new charge", c, existing, err)
			}
			if c := provider.Counts(acct); c.Authorizations != 3 {
				t.Fatalf("provider %+v: want the money taken for the three charges", c)
			}
		})
	}
}

// TestEachUseOfAKeyChargesOnce: with the records in the database, every
// attempt of one use of a request key gives the provider one key, so an
// attempt that fails after the provider took the money is retried without
// taking it twice, and of two attempts that run at once (one of them
// outlived its lease) one writes the charge and the other nothing. The
// key's next use, and the use after a declined one, are payments of their
// own.
func TestEachUseOfAKeyChargesOnce(t *testing.T) {
	for name, db := range testDBs(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			acct, k := "acct_"+rand.Text()[:10], "k-"+rand.Text()
			req := ChargeRequest{Amount: 1000, Currency: "usd", Customer: "cus_1"}
			provider := &Provider{}
			inDB := func() (*gorm.DB, error) { return db, nil }
			down := func() (*gorm.DB, error) { return nil, errors.New("the database is down") }
			charge := func(a Authorizer, tx func() (*gorm.DB, error), r ChargeRequest) (Charge, error) {
				return CreateCharge(ctx, db, tx, a, acct, k, r, time.Now())
			}
			want := func(what string, charges, authorizations int64) {
				t.Helper()
				if n, c := countRows(t, db, &Charge{}, acct), provider.Counts(acct); n != charges || c.Authorizations != authorizations {
					t.Fatalf("%s: %d charges, provider %+v; want %d charges, %d authorizations", what, n, c, charges, authorizations)
				}
			}

			if _, err := charge(provider, down, req); err == nil {
				t.Fatal("an attempt whose database is down succeeded")
			}
			if _, err := charge(provider, inDB, req); err != nil {
				t.Fatalf("its retry: %v", err)
			}
			want("the first use, retried", 1, 1)

			// The next use, two attempts at once, with another amount.
			next := req
			next.Amount = 2500
			b := &barrier{n: 2, provider: provider, open: make(chan struct{})}
			errs := make(chan error, 2)
			for range 2 {
				go func() { _, err := charge(b, inDB, next); errs <- err }()
			}
			var failed []error
			for range 2 {
				if err := <-errs; err != nil {
					failed = append(failed, err)
				}
			}
			if len(failed) != 1 || !errors.Is(failed[0], ErrLeaseLost) {
				t.Fatalf("two attempts of one use: errors %v, want one that lost the use to the other", failed)
			}
			want("the second use", 2, 2)

			// A declined use, then one for a customer whose card works.
			if _, err := charge(provider, inDB, ChargeRequest{Amount: 300, Currency: "usd", Customer: DeclinedCustomer}); !errors.Is(err, ErrDeclined) {
				t.Fatalf("the declined customer: %v, want ErrDeclined", err)
			}
			if _, err := charge(provider, inDB, req); err != nil {
				t.Fatalf("the use after a decline: %v", err)
			}
			want("the use after a decline", 3, 3)
		})
	}
}

// laterAttempt marks the context of the attempt that
// TestAChargeWrittenDuringTheLookupIsNotTakenAgain interrupts.
type laterAttempt struct{}

// TestAChargeWrittenDuringTheLookupIsNotTakenAgain: an attempt whose record
// was lost looks its key up (the charge, the key's uses) in more than one
// read. Another attempt of the same charge that writes it between those
// reads must not make the first ask the provider under a new key: the
// money would be taken twice, though the database keeps one charge.
func TestAChargeWrittenDuringTheLookupIsNotTakenAgain(t *testing.T) {
	for name, db := range testDBs(t) {
		t.Run(name, func(t *testing.T) {
			acct := "acct_" + rand.Text()[:10]
			req := ChargeRequest{Amount: 900, Currency: "usd", Customer: "cus_1"}
			provider := &Provider{}
			k := key("k-between")
			var other Charge
			var once sync.Once
			// After the interrupted attempt's first read, the other
			// attempt runs from start to end.
			err := db.Callback().Query().After("gorm:query").Register("test:between", func(tx *gorm.DB) {
				if tx.Statement.Context.Value(laterAttempt{}) == nil {
					return
				}
				once.Do(func() {
					c, existing, err := CreateChargeOnce(context.Background(), db, provider, acct, k, req)
					if err != nil || existing {
						t.Errorf("the other attempt: existing %v, %v", existing, err)
					}
					other = c
				})
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.WithValue(t.Context(), laterAttempt{}, true)
			c, existing, err := CreateChargeOnce(ctx, db, provider, acct, k, req)
			if err != nil || !existing || c.ID != other.ID {
				t.Fatalf("interrupted attempt: %s existing %v (%v), want the other attempt's %s", c.ID, existing, err, other.ID)
			}
			if n := countRows(t, db, &Charge{}, acct); n != 1 {
				t.Fatalf("%d charges for one key", n)
			}
			if got := provider.Counts(acct).Authorizations; got != 1 {
				t.Fatalf("the provider took the money %d times for one charge", got)
			}
		})
	}
}
