package main

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idemkit/core/idemtest"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/payments"
)

// lossyProvider is the demo's provider, except that while lose is set the
// caller never hears its answer (a timeout on the way back): the money
// may be taken, and the attempt fails with a transient error.
type lossyProvider struct {
	*payments.Provider
	lose atomic.Bool
}

func (p *lossyProvider) Authorize(ctx context.Context, a payments.Authorization) error {
	err := p.Provider.Authorize(ctx, a)
	if p.lose.Load() {
		return payments.ErrProviderDown
	}
	return err
}

// TestExpiredKeyIsNewInTheDatabase: with the records in the database (the
// default mode), a key whose record expired is a new key, as the policy
// says, and its next charge is a charge the payment provider really makes:
// the provider, which remembers its keys longer than this -ttl, gets a key
// of its own for each use of the request's key, the same for every attempt
// of that use. Whatever the new charge's body, and after a declined use
// too, the key makes a new charge, never a 500, and the money taken always
// matches the charges. The Engine's clock is moved past the TTL rather
// than waited for.
func TestExpiredKeyIsNewInTheDatabase(t *testing.T) {
	for dbName, db := range databases(t) {
		t.Run(dbName, func(t *testing.T) {
			clock := idemtest.NewClock(time.Now())
			cfg := app.DefaultConfig()
			cfg.DB, cfg.ProviderLatency, cfg.TTL, cfg.Now = db, 0, 10*time.Minute, clock.Now
			d := start(t, cfg)
			provider := &lossyProvider{Provider: d.app.Provider}
			d.app.API.Provider = provider

			acct, key := newAccount(), newKey()
			post := func(key, body string) reply {
				t.Helper()
				return d.do(t, http.MethodPost, "/v1/charges", acct, key, body)
			}
			// ledger checks that the provider took money once per charge.
			ledger := func(what string, charges float64) {
				t.Helper()
				if p, b := d.provider(t, acct), d.balance(t, acct); b["charges"] != charges || p["authorizations"] != charges {
					t.Fatalf("%s: provider %v, balance %v: want %v charges, each authorized once", what, p, b, charges)
				}
			}
			created := func(what string, r reply, amount float64, not ...string) string {
				t.Helper()
				if r.status != 201 || r.replayed() {
					t.Fatalf("%s: %d replayed=%v %s, want a new charge", what, r.status, r.replayed(), r.body)
				}
				c := r.json(t)
				id, _ := c["id"].(string)
				for _, old := range not {
					if id == old {
						t.Fatalf("%s: answered with the charge %s the key made before it expired, want a new one", what, old)
					}
				}
				if c["amount"] != amount {
					t.Fatalf("%s: a charge of %v, want %v", what, c["amount"], amount)
				}
				return id
			}
			replayed := func(what string, r reply, id string) {
				t.Helper()
				if r.status != 201 || !r.replayed() || r.json(t)["id"] != id {
					t.Fatalf("%s: %d replayed=%v %s, want charge %s replayed", what, r.status, r.replayed(), r.body, id)
				}
			}

			first := created("the charge", post(key, chargeBody), 1999)
			replayed("its retry", post(key, chargeBody), first)
			ledger("one charge", 1)

			// Expired: the same request again is a second charge. Its
			// first attempt never hears the provider's answer, though the
			// money was taken; its retry gets that authorization back.
			clock.Advance(cfg.TTL)
			provider.lose.Store(true)
			post(key, chargeBody).problem(t, 503, "provider-unavailable")
			provider.lose.Store(false)
			second := created("the key once its record expired", post(key, chargeBody), 1999, first)
			replayed("the new charge's retry", post(key, chargeBody), second)
			ledger("the key used twice", 2)

			// Expired again, the key comes back with another amount.
			clock.Advance(cfg.TTL)
			created("the key expired again, with another amount", post(key, strings.Replace(chargeBody, "1999", "500", 1)), 500, first, second)
			ledger("the key used three times", 3)

			// A key whose use was declined, once expired, pays for a
			// customer whose card works.
			declined := newKey()
			post(declined, `{"amount":700,"currency":"usd","customer":"cus_declined"}`).problem(t, 402, "card-declined")
			clock.Advance(cfg.TTL)
			created("a declined key once expired, for another customer", post(declined, chargeBody), 1999)
			ledger("after the declined key's new use", 4)
		})
	}
}
