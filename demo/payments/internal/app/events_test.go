package app

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/payments"
)

// serveAll opens the demo with cfg and serves it as the command does
// (App.Serve: the provider's events run) until the test ends.
func serveAll(t *testing.T, cfg Config) (*App, string) {
	t.Helper()
	a, ln := open(t, cfg)
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, Listeners{API: ln}) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		a.Close()
	})
	return a, "http://" + ln.Addr().String()
}

// eventsConfig is a demo whose provider settles fast and sends every
// webhook twice.
func eventsConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.DB, cfg.ProviderLatency = filepath.Join(t.TempDir(), "p.db"), 0
	cfg.SettleEvery, cfg.RedeliverAfter, cfg.WebhookDuplicateRate = 50*time.Millisecond, 500*time.Millisecond, 1
	return cfg
}

// chargeAndRefund makes n charges of account through base, refunding 100
// of every other one, and returns the balance they make.
func chargeAndRefund(t *testing.T, base, account string, n int) payments.Balance {
	t.Helper()
	var want payments.Balance
	for i := range n {
		c := postCharge(t, base, account, fmt.Sprintf("c-%d", i), 1000+i)
		if c.status != http.StatusCreated {
			t.Fatalf("charge %d: %+v", i, c)
		}
		want.Charges++
		want.Charged += c.amount
		if i%2 == 0 {
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/refunds", strings.NewReader(fmt.Sprintf(`{"charge":%q,"amount":100}`, c.id)))
			req.Header.Set("Authorization", "Bearer "+account)
			req.Header.Set("Idempotency-Key", fmt.Sprintf(`"r-%d"`, i))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != http.StatusCreated {
				t.Fatalf("refund %d: %v %v", i, resp, err)
			}
			resp.Body.Close()
			want.Refunds++
			want.Refunded += 100
		}
	}
	want.SettledCharged, want.SettledRefunded, want.Settled = want.Charged, want.Refunded, want.Charged-want.Refunded
	want.Settlements = want.Charges + want.Refunds
	return want
}

// settledOnce waits until account's balance is want, every charge and
// refund settled, then checks that each was settled by exactly one ledger
// entry of its own event.
func settledOnce(t *testing.T, a *App, account string, want payments.Balance) {
	t.Helper()
	var got payments.Balance
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var err error
		if got, err = payments.GetBalance(t.Context(), a.DB, account); err != nil {
			t.Fatal(err)
		}
		if got == want {
			break
		}
		if time.Now().After(deadline) || got.Settlements > want.Settlements {
			t.Fatalf("balance %+v, want %+v", got, want)
		}
	}
	var entries []payments.Settlement
	if err := a.DB.Where("account = ?", account).Find(&entries).Error; err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, s := range entries {
		if seen[s.Object] || s.Event != payments.EventID(s.Object) {
			t.Fatalf("entry %+v: its object settled twice, or by another's event", s)
		}
		seen[s.Object] = true
	}
}

// TestProviderSettlesByWebhook: the provider sends every charge's and
// refund's settlement event as a signed webhook, each delivery twice at
// once, and the demo applies each event once.
func TestProviderSettlesByWebhook(t *testing.T) {
	a, base := serveAll(t, eventsConfig(t))
	acct := "acct_" + rand.Text()[:10]
	want := chargeAndRefund(t, base, acct, 10)
	settledOnce(t, a, acct, want)
	c := a.Provider.Counts(acct)
	if c.Events != want.Settlements || c.Deliveries < 2*c.Events {
		t.Fatalf("provider counts %+v: want %d events, each delivered twice or more", c, want.Settlements)
	}
}

// TestProviderSettlesByStream: two instances share a database and an
// event stream, and only the stream carries the events: each event, added
// to the stream by both instances' providers, is applied once, and both
// consumers take part.
func TestProviderSettlesByStream(t *testing.T) {
	addr := redisAddr(t)
	if addr == "" {
		return
	}
	cfg := eventsConfig(t)
	cfg.Webhooks, cfg.Events, cfg.EventStream = false, "redis://"+addr+"/0", "test:events:"+rand.Text()
	one, base := serveAll(t, cfg)
	two, _ := serveAll(t, cfg)
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		c.Del(context.Background(), cfg.EventStream)
		c.Close()
	})
	acct := "acct_" + rand.Text()[:10]
	want := chargeAndRefund(t, base, acct, 30)
	settledOnce(t, one, acct, want)
	if one.Stream.Read.Load() == 0 || two.Stream.Read.Load() == 0 {
		t.Fatalf("the consumers read %d and %d entries: both instances must consume", one.Stream.Read.Load(), two.Stream.Read.Load())
	}
	// Each provider sends what is pending when it looks: between them,
	// every event, once or more.
	c1, c2 := one.Provider.Counts(acct), two.Provider.Counts(acct)
	if one.Webhooks != nil || c1.Events+c2.Events < want.Settlements || c1.Deliveries+c2.Deliveries < c1.Events+c2.Events {
		t.Fatalf("webhooks sent, or fewer stream entries than events: %+v and %+v for %d events", c1, c2, want.Settlements)
	}
}

// TestEventOnceWithRecordsInRedis: with the records in Redis, an event
// whose record Redis lost is applied again, and answered with the ledger
// entry written the first time, never with a second one.
func TestEventOnceWithRecordsInRedis(t *testing.T) {
	addr := redisAddr(t)
	if addr == "" {
		return
	}
	cfg := DefaultConfig()
	cfg.DB, cfg.Records, cfg.ProviderLatency = filepath.Join(t.TempDir(), "p.db"), "redis://"+addr+"/0", 0
	a, base := serve(t, cfg)
	acct := "acct_" + rand.Text()[:10]
	c := postCharge(t, base, acct, "c-1", 1999)
	e := payments.Event{ID: payments.EventID(c.id) + "_" + rand.Text(), Type: payments.ChargeSettled, Time: time.Now(),
		Data: payments.EventData{Object: c.id, Account: acct, Amount: 1999}}
	first, err := a.API.ApplyEvent(t.Context(), e.ID, e.Body())
	if err != nil {
		t.Fatal(err)
	}
	loseRecord(t, addr, idem.JobID(api.EventScope, e.ID)) // a job's record, as Do keeps it
	again, err := a.API.ApplyEvent(t.Context(), e.ID, e.Body())
	if err != nil {
		t.Fatal(err)
	}
	var s1, s2 struct{ ID int64 }
	json.Unmarshal(first, &s1)
	json.Unmarshal(again, &s2)
	b, _ := payments.GetBalance(t.Context(), a.DB, acct)
	if s1.ID == 0 || s2.ID != s1.ID || b.Settlements != 1 || a.API.Existing.Load() != 1 {
		t.Fatalf("after the record was lost: entries %d and %d, %d in the ledger, %d answered with the existing one; want one entry, answered again",
			s1.ID, s2.ID, b.Settlements, a.API.Existing.Load())
	}
}
