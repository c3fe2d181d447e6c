package payments

import (
	"context"
	mrand "math/rand/v2"
	"sync"
	"time"
)

// Authorizer takes money through a payment provider. *Provider, the
// simulated one, is the only implementation outside tests.
type Authorizer interface {
	Authorize(ctx context.Context, a Authorization) error
}

// Authorization asks the provider to take an amount from a customer on
// behalf of an account.
type Authorization struct {
	Account  string
	Customer string
	Amount   int64
	Currency string
}

// Counts is what the provider did for one account.
type Counts struct {
	// Calls counts the authorization requests that reached the provider.
	Calls int64 `json:"calls"`
	// Authorizations counts the times money was taken.
	Authorizations int64 `json:"authorizations"`
}

// Provider simulates the card network: it takes time and sometimes fails,
// and it counts what it did per account, so that tests can hold the money
// taken against the charges recorded. Use it by pointer; the zero value is
// a provider that answers at once and never fails.
type Provider struct {
	Latency     time.Duration
	FailureRate float64 // 0..1: probability of a transient failure

	mu     sync.Mutex
	counts map[string]*Counts
}

// Authorize asks the provider to take the money. It fails with ErrDeclined
// for DeclinedCustomer and with ErrProviderDown, at the configured rate,
// for a transient failure. Like a remote provider, it decides as soon as
// the request reaches it: a caller that stops waiting during the latency
// gets ctx's error, but the money may have been taken.
func (p *Provider) Authorize(ctx context.Context, a Authorization) error {
	if err := ctx.Err(); err != nil {
		return err // never sent
	}
	err := p.decide(a)
	if p.Latency > 0 {
		t := time.NewTimer(p.Latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	return err
}

// decide is the provider's side of an authorization.
func (p *Provider) decide(a Authorization) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.countsOf(a.Account)
	c.Calls++
	switch {
	case p.FailureRate > 0 && mrand.Float64() < p.FailureRate:
		return ErrProviderDown
	case a.Customer == DeclinedCustomer:
		return ErrDeclined
	}
	c.Authorizations++
	return nil
}

func (p *Provider) countsOf(account string) *Counts {
	if p.counts == nil {
		p.counts = map[string]*Counts{}
	}
	c := p.counts[account]
	if c == nil {
		c = new(Counts)
		p.counts[account] = c
	}
	return c
}

// Counts returns what the provider did for account so far.
func (p *Provider) Counts(account string) Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.counts[account]; c != nil {
		return *c
	}
	return Counts{}
}
