package app

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idemkit/core/idemtest"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/payments"
	"github.com/idemkit/idemkit/demo/payments/internal/stream"
	"github.com/idemkit/idemkit/demo/payments/internal/testdb"
	"github.com/idemkit/idemkit/demo/payments/internal/webhook"
)

// deliver posts the webhook of e to base, signed with secret at signedAt,
// and returns the status and body of the answer.
func deliver(t *testing.T, base string, secret webhook.Secret, e payments.Event, signedAt time.Time) (int, []byte) {
	t.Helper()
	body := e.Body()
	req, _ := http.NewRequest(http.MethodPost, base+api.WebhookPath, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.HeaderID, e.ID)
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(signedAt.Unix(), 10))
	req.Header.Set(webhook.HeaderSignature, secret.Sign(e.ID, signedAt, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, answer
}

// settledEvents makes a charge for account through base, refunds part
// of it, and returns the settlement events of both.
func settledEvents(t *testing.T, a *App, base, account string) []payments.Event {
	t.Helper()
	want := chargeAndRefund(t, base, account, 1)
	events := pendingOf(t, a, account)
	if int64(len(events)) != want.Charges+want.Refunds {
		t.Fatalf("pending events %+v, want one per charge and refund", events)
	}
	return events
}

// pendingOf returns account's pending settlement events.
func pendingOf(t *testing.T, a *App, account string) []payments.Event {
	t.Helper()
	pending, _, err := payments.PendingEvents(t.Context(), a.DB)
	if err != nil {
		t.Fatal(err)
	}
	var mine []payments.Event
	for _, e := range pending {
		if e.Data.Account == account {
			mine = append(mine, e)
		}
	}
	return mine
}

// ledgerOnce checks that each of the events settled its object with
// exactly one entry, and nothing else was written for account.
func ledgerOnce(t *testing.T, a *App, account string, events []payments.Event, when string) {
	t.Helper()
	var entries []payments.Settlement
	if err := a.DB.Where("account = ?", account).Find(&entries).Error; err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, s := range entries {
		per[s.Object]++
	}
	for _, e := range events {
		if per[e.Data.Object] != 1 {
			t.Fatalf("%s: %d ledger entries for %s, want 1 (ledger %+v)", when, per[e.Data.Object], e.Data.Object, entries)
		}
	}
	if len(entries) != len(events) {
		t.Fatalf("%s: %d ledger entries for %d events", when, len(entries), len(events))
	}
}

// consume runs s's consumer, applying entries with apply, until the
// group has read every entry and acknowledged them all, then stops it.
func consume(t *testing.T, s *stream.Stream, apply stream.Apply) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Consume(ctx, apply); close(done) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if drained, _, err := s.Drained(t.Context()); err == nil && drained {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the stream's entries were not all read and acknowledged within 30 s")
		}
	}
}

// TestEventsSettleOnceAfterTheirRecordsExpire: a settlement event
// delivered again once its idempotency record has expired (the demo's
// clock moved 25 hours, past the 24-hour TTL) is answered with the ledger
// entry written the first time, and writes no second one, whichever way it
// comes again: a webhook the provider retries (a Standard Webhooks sender
// keeps trying for about 27 hours), a stream entry another consumer claims
// after the first was killed before XACK, and every entry of the stream
// delivered again to a consumer group recreated from 0. With the records
// in the database (SQLite, PostgreSQL) and in Redis.
func TestEventsSettleOnceAfterTheirRecordsExpire(t *testing.T) {
	addr := redisAddr(t)
	if addr == "" {
		return
	}
	for name, mode := range map[string]struct {
		db      func(testing.TB) string
		records string
	}{
		"records-in-db/sqlite":      {db: func(testing.TB) string { return filepath.Join(t.TempDir(), "p.db") }},
		"records-in-db/postgres":    {db: testdb.Postgres},
		"records-in-redis/sqlite":   {db: func(testing.TB) string { return filepath.Join(t.TempDir(), "p.db") }, records: "redis://" + addr + "/0"},
		"records-in-redis/postgres": {db: testdb.Postgres, records: "redis://" + addr + "/0"},
	} {
		t.Run(name, func(t *testing.T) {
			clock := idemtest.NewClock(time.Now())
			cfg := DefaultConfig()
			cfg.DB, cfg.Records, cfg.ProviderLatency, cfg.Now = mode.db(t), mode.records, 0, clock.Now
			cfg.Events, cfg.EventStream = "redis://"+addr+"/0", "test:events:"+rand.Text()
			a, base := serve(t, cfg)
			t.Cleanup(func() { a.Stream.Client.Del(context.Background(), cfg.EventStream) })
			acct := "acct_" + rand.Text()[:10]
			events := settledEvents(t, a, base, acct)
			secret := a.API.WebhookSecret

			// By webhook, then again 25 hours later, signed anew.
			first := map[string][]byte{}
			for _, e := range events {
				status, body := deliver(t, base, secret, e, clock.Now())
				if status != http.StatusOK {
					t.Fatalf("webhook of %s: %d %s", e.ID, status, body)
				}
				first[e.ID] = body
			}
			clock.Advance(25 * time.Hour)
			for _, e := range events {
				status, body := deliver(t, base, secret, e, clock.Now())
				if status != http.StatusOK || !bytes.Equal(body, first[e.ID]) {
					t.Fatalf("webhook of %s delivered again 25 h later: %d %s, want 200 %s", e.ID, status, body, first[e.ID])
				}
			}
			ledgerOnce(t, a, acct, events, "webhooks delivered again once their records expired")

			// On the stream: a consumer applies the entries and is killed
			// before XACK; 25 hours later another claims them.
			entries := make([]stream.Event, len(events))
			for i, e := range events {
				entries[i] = stream.Event{ID: e.ID, Body: e.Body()}
			}
			if err := a.Stream.Publish(t.Context(), entries); err != nil {
				t.Fatal(err)
			}
			victim := &stream.Stream{Client: a.Stream.Client, Key: a.Stream.Key, Group: a.Stream.Group, Consumer: "victim"}
			ctx, kill := context.WithCancel(t.Context())
			applied := 0
			victim.Consume(ctx, func(ctx context.Context, e stream.Event) bool {
				if !a.API.ConsumeEvent(ctx, e.ID, e.Body) {
					t.Errorf("the victim could not apply %s", e.ID)
				}
				if applied++; applied == len(events) {
					kill() // dies before the batch's XACK
				}
				return false
			})
			clock.Advance(25 * time.Hour)
			heir := &stream.Stream{Client: a.Stream.Client, Key: a.Stream.Key, Group: a.Stream.Group, Consumer: "heir", ClaimAfter: time.Millisecond}
			consume(t, heir, func(ctx context.Context, e stream.Event) bool { return a.API.ConsumeEvent(ctx, e.ID, e.Body) })
			if heir.Claimed.Load() != int64(len(events)) {
				t.Fatalf("the heir claimed %d entries, want the victim's %d", heir.Claimed.Load(), len(events))
			}
			ledgerOnce(t, a, acct, events, "stream entries claimed from a consumer killed before XACK, once their records expired")

			// The group is destroyed and made again from 0, 25 hours on:
			// every entry of the stream is delivered again.
			if err := a.Stream.Client.XGroupDestroy(t.Context(), a.Stream.Key, a.Stream.Group).Err(); err != nil {
				t.Fatal(err)
			}
			clock.Advance(25 * time.Hour)
			again := &stream.Stream{Client: a.Stream.Client, Key: a.Stream.Key, Group: a.Stream.Group, Consumer: "again"}
			consume(t, again, func(ctx context.Context, e stream.Event) bool { return a.API.ConsumeEvent(ctx, e.ID, e.Body) })
			if again.Read.Load() != int64(len(events)) {
				t.Fatalf("the recreated group read %d entries, want %d", again.Read.Load(), len(events))
			}
			ledgerOnce(t, a, acct, events, "every stream entry delivered again to a group recreated from 0, once their records expired")
			if b, err := payments.GetBalance(t.Context(), a.DB, acct); err != nil || b.SettledCharged != b.Charged || b.SettledRefunded != b.Refunded {
				t.Fatalf("balance %+v, %v: want every charge and refund settled once", b, err)
			}
		})
	}
}
