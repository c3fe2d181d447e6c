package payments

import (
	"context"
	"errors"
	"testing"
	"time"
	"unsafe"
)

func TestProviderDeduplicatesByKey(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &Provider{KeyRetention: time.Hour, now: func() time.Time { return now }}
	ctx := context.Background()
	pay := Authorization{IdempotencyKey: "k1", Account: "a", Customer: "cus_1", Amount: 500, Currency: "usd"}

	for range 3 {
		if err := p.Authorize(ctx, pay); err != nil {
			t.Fatal(err)
		}
	}
	if c := p.Counts("a"); c.Calls != 3 || c.Authorizations != 1 {
		t.Fatalf("three attempts with one key: %+v, want 3 calls and 1 authorization", c)
	}

	other := pay
	other.Amount = 600
	if err := p.Authorize(ctx, other); !errors.Is(err, ErrProviderKeyReused) {
		t.Fatalf("a known key with another amount: %v, want ErrProviderKeyReused", err)
	}

	declined := Authorization{IdempotencyKey: "k2", Account: "a", Customer: DeclinedCustomer, Amount: 500, Currency: "usd"}
	for range 2 {
		if err := p.Authorize(ctx, declined); !errors.Is(err, ErrDeclined) {
			t.Fatalf("declined: %v", err)
		}
	}

	noKey := pay
	noKey.IdempotencyKey = ""
	p.Authorize(ctx, noKey)
	p.Authorize(ctx, noKey)
	if c := p.Counts("a"); c.Authorizations != 3 {
		t.Fatalf("two payments without a key: %d authorizations in all, want 1+2", c.Authorizations)
	}

	// After the retention the key is forgotten, and counts as new.
	now = now.Add(time.Hour)
	if err := p.Authorize(ctx, pay); err != nil {
		t.Fatal(err)
	}
	if c := p.Counts("a"); c.Authorizations != 4 || len(p.keys) != 1 {
		t.Fatalf("after the retention: %+v, %d keys kept", c, len(p.keys))
	}
	if c := p.Counts("b"); c != (Counts{}) {
		t.Fatalf("another account: %+v", c)
	}
}

// TestProviderTransientFailureNotRemembered: a transient failure took no
// money, so the next attempt with the same key is tried afresh.
func TestProviderTransientFailureNotRemembered(t *testing.T) {
	p := &Provider{FailureRate: 1}
	pay := Authorization{IdempotencyKey: "k", Account: "a", Customer: "cus_1", Amount: 1, Currency: "usd"}
	if err := p.Authorize(context.Background(), pay); !errors.Is(err, ErrProviderDown) {
		t.Fatalf("%v, want ErrProviderDown", err)
	}
	p.FailureRate = 0
	if err := p.Authorize(context.Background(), pay); err != nil {
		t.Fatal(err)
	}
	if c := p.Counts("a"); c.Calls != 2 || c.Authorizations != 1 {
		t.Fatalf("%+v", c)
	}
}

// TestProviderAnswerLost: a caller that stops waiting has still had its
// money taken; its next attempt with the same key learns the answer and
// takes nothing more.
func TestProviderAnswerLost(t *testing.T) {
	p := &Provider{Latency: time.Hour}
	pay := Authorization{IdempotencyKey: "k", Account: "a", Customer: "cus_1", Amount: 1, Currency: "usd"}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Authorize(ctx, pay) }()
	for p.Counts("a").Calls == 0 {
		time.Sleep(time.Millisecond) // until the provider has the request
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want the caller's cancellation", err)
	}
	p.Latency = 0
	if err := p.Authorize(context.Background(), pay); err != nil {
		t.Fatal(err)
	}
	if c := p.Counts("a"); c.Calls != 2 || c.Authorizations != 1 {
		t.Fatalf("%+v, want 2 calls and 1 authorization", c)
	}
	// A request the caller cancelled before sending never reaches it.
	if err := p.Authorize(ctx, pay); !errors.Is(err, context.Canceled) || p.Counts("a").Calls != 2 {
		t.Fatalf("%v, %+v", err, p.Counts("a"))
	}
}

// TestProviderKeepsItsOwnStrings: a server may hand the provider strings
// that alias a buffer it refills with the next request (Fiber does). The
// provider must not keep them: the buffer's next contents would move the
// account's counts to another account, and the payment's retry would be
// refused as another payment.
func TestProviderKeepsItsOwnStrings(t *testing.T) {
	p := &Provider{}
	ctx := context.Background()
	buf := []byte("acct_AAAAAAAAAA")
	aliased := unsafe.String(&buf[0], len(buf))
	pay := Authorization{IdempotencyKey: "k1", Account: aliased, Customer: "cus_1", Amount: 500, Currency: "usd"}
	if err := p.Authorize(ctx, pay); err != nil {
		t.Fatal(err)
	}
	copy(buf, "acct_BBBBBBBBBB") // the next request, another account

	if c := p.Counts("acct_AAAAAAAAAA"); c != (Counts{Calls: 1, Authorizations: 1}) {
		t.Fatalf("the account's counts after its buffer was reused: %+v, want 1 call and 1 authorization", c)
	}
	if c := p.Counts("acct_BBBBBBBBBB"); c != (Counts{}) {
		t.Fatalf("another account's counts: %+v, want none", c)
	}
	retry := pay
	retry.Account = "acct_AAAAAAAAAA"
	if err := p.Authorize(ctx, retry); err != nil {
		t.Fatalf("the payment's retry: %v, want its first answer", err)
	}
}
