package payments

import (
	"context"
	"errors"
	mrand "math/rand/v2"
	"strings"
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
	// IdempotencyKey names the logical payment, as real providers take it:
	// every attempt of one payment sends the same key, and the provider
	// answers a repeated key with its first answer without taking the
	// money again. Empty: no deduplication.
	IdempotencyKey string
	Account        string
	Customer       string
	Amount         int64
	Currency       string
}

// Counts is what the provider did for one account.
type Counts struct {
	// Calls counts the authorization requests that reached the provider.
	Calls int64 `json:"calls"`
	// Authorizations counts the times money was taken: never more than
	// once for one idempotency key.
	Authorizations int64 `json:"authorizations"`
	// Events counts the settlement events the provider sent for the
	// account, each once however often it went out, and Deliveries their
	// deliveries: every webhook request (duplicates and retries included)
	// and every stream entry.
	Events     int64 `json:"events"`
	Deliveries int64 `json:"deliveries"`
}

// DefaultRedeliverAfter is how long the provider waits, when
// Provider.RedeliverAfter is zero, for a settlement event it sent to be
// applied before it sends the event again.
const DefaultRedeliverAfter = 10 * time.Second

// DefaultKeyRetention is how long the provider remembers an idempotency
// key when Provider.KeyRetention is zero: as long as the demo remembers
// its own keys by default, so that no retry the demo runs again can find
// the provider's memory of the payment gone.
const DefaultKeyRetention = 24 * time.Hour

// ErrProviderKeyReused: the provider got an idempotency key it knows with
// another payment.
var ErrProviderKeyReused = errors.New("payment provider: idempotency key reused with another payment")

// Provider simulates the card network: it takes time and sometimes fails,
// deduplicates by idempotency key, and counts what it did per account, so
// that tests can hold the money taken against the charges recorded. Use it
// by pointer; the zero value is a provider that answers at once and never
// fails. Keys are forgotten after KeyRetention; the counts are kept for the
// life of the process, one small entry per account that ever charged.
type Provider struct {
	Latency      time.Duration
	FailureRate  float64       // 0..1: probability of a transient failure
	KeyRetention time.Duration // default DefaultKeyRetention
	// RedeliverAfter is how long a settlement event may go unapplied after
	// it was sent before Due gives it again (default DefaultRedeliverAfter).
	RedeliverAfter time.Duration

	now func() time.Time // default time.Now; tests move it

	mu     sync.Mutex
	counts map[string]*Counts
	keys   map[string]*answer
	order  []*answer // keys in the order they came, for expiry
	// sent holds when each settlement event not yet seen applied was last
	// given out by Due.
	sent map[string]time.Time
}

// answer is the provider's first final answer to an idempotency key.
type answer struct {
	key  string
	auth Authorization
	err  error // nil (authorized) or ErrDeclined
	at   time.Time
}

// Authorize asks the provider to take the money. It fails with ErrDeclined
// for DeclinedCustomer and with ErrProviderDown, at the configured rate,
// for a transient failure. Like a remote provider, it decides as soon as
// the request reaches it: a caller that stops waiting during the latency
// gets ctx's error, but the money may have been taken, and the next
// attempt with the same idempotency key learns the answer. Final answers
// (authorized, declined) are kept per key; a transient failure is not,
// so the next attempt tries again.
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
	now := p.clock()
	p.expire(now)
	c := p.countsOf(a.Account)
	c.Calls++
	if a.IdempotencyKey != "" {
		if first := p.keys[a.IdempotencyKey]; first != nil {
			if first.auth != a {
				return ErrProviderKeyReused
			}
			return first.err
		}
	}
	var err error
	switch {
	case p.FailureRate > 0 && mrand.Float64() < p.FailureRate:
		return ErrProviderDown
	case a.Customer == DeclinedCustomer:
		err = ErrDeclined
	default:
		c.Authorizations++
	}
	if a.IdempotencyKey != "" {
		if p.keys == nil {
			p.keys = map[string]*answer{}
		}
		ans := &answer{key: a.IdempotencyKey, auth: a.own(), err: err, at: now}
		p.keys[ans.key] = ans
		p.order = append(p.order, ans)
	}
	return err
}

// expire forgets the keys older than the retention, oldest first.
func (p *Provider) expire(now time.Time) {
	keep := p.KeyRetention
	if keep <= 0 {
		keep = DefaultKeyRetention
	}
	n := 0
	for n < len(p.order) && now.Sub(p.order[n].at) >= keep {
		delete(p.keys, p.order[n].key)
		n++
	}
	if n > 0 {
		clear(p.order[:n])
		p.order = p.order[n:]
	}
}

func (p *Provider) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

func (p *Provider) countsOf(account string) *Counts {
	if p.counts == nil {
		p.counts = map[string]*Counts{}
	}
	c := p.counts[account]
	if c == nil {
		c = new(Counts)
		p.counts[strings.Clone(account)] = c
	}
	return c
}

// own returns a with strings of its own. The caller's may alias a buffer
// its server reuses for the next request (Fiber's do): a kept string that
// changes under the provider would move one account's counts to another
// and refuse a payment's retry as another payment.
func (a Authorization) own() Authorization {
	a.IdempotencyKey = strings.Clone(a.IdempotencyKey)
	a.Account = strings.Clone(a.Account)
	a.Customer = strings.Clone(a.Customer)
	a.Currency = strings.Clone(a.Currency)
	return a
}

// Due takes the settlement events not yet applied (PendingEvents) and
// returns those the provider sends now: the ones it never sent, and the
// ones it sent RedeliverAfter ago or more, which their deliveries have not
// got applied (all failed, or the answers were lost). An event stays
// pending until applied, so none is ever lost, and a redelivery may arrive
// beside an earlier delivery still under way: the receiver's idempotency
// keeps both to one application. Unless partial (pending may lack some
// events), the events no longer pending are forgotten: they were applied.
func (p *Provider) Due(pending []Event, partial bool) []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock()
	again := p.RedeliverAfter
	if again <= 0 {
		again = DefaultRedeliverAfter
	}
	if p.sent == nil {
		p.sent = map[string]time.Time{}
	}
	var due []Event
	for _, e := range pending {
		last, seen := p.sent[e.ID]
		switch {
		case !seen:
			p.countsOf(e.Data.Account).Events++
		case now.Sub(last) < again:
			continue
		}
		p.sent[e.ID] = now
		due = append(due, e)
	}
	if !partial && len(p.sent) > len(pending) {
		still := make(map[string]bool, len(pending))
		for _, e := range pending {
			still[e.ID] = true
		}
		for id := range p.sent {
			if !still[id] {
				delete(p.sent, id)
			}
		}
	}
	return due
}

// Delivered counts one delivery of a settlement event of account.
func (p *Provider) Delivered(account string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.countsOf(account).Deliveries++
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
