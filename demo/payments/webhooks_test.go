package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/payments"
	"github.com/idemkit/idemkit/demo/payments/internal/webhook"
)

// testSecret is the webhook secret of the demos the tests start.
var testSecret = webhook.NewSecret()

// webhookAt delivers the event id with body to d's webhook endpoint,
// signed with secret at signedAt.
func (d *demo) webhookAt(t *testing.T, id string, body []byte, secret webhook.Secret, signedAt time.Time) reply {
	t.Helper()
	h := http.Header{}
	h.Set(webhook.HeaderID, id)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(signedAt.Unix(), 10))
	h.Set(webhook.HeaderSignature, secret.Sign(id, signedAt, body))
	return d.doHeader(t, http.MethodPost, api.WebhookPath, h, "", string(body))
}

// webhook delivers an event as the provider does: signed now.
func (d *demo) webhook(t *testing.T, e payments.Event) reply {
	t.Helper()
	return d.webhookAt(t, e.ID, e.Body(), testSecret, time.Now())
}

// charged makes a charge of 1999 for a new account, and returns the
// account and the charge's settlement event, as the provider would send it.
func (d *demo) charged(t *testing.T) (string, payments.Event) {
	t.Helper()
	acct := newAccount()
	r := d.do(t, http.MethodPost, "/v1/charges", acct, newKey(), chargeBody)
	if r.status != 201 {
		t.Fatalf("charge: %d %s", r.status, r.body)
	}
	c := r.json(t)
	id := c["id"].(string)
	created, _ := time.Parse(time.RFC3339, c["created"].(string))
	return acct, payments.Event{ID: payments.EventID(id), Type: payments.ChargeSettled, Time: created,
		Data: payments.EventData{Object: id, Account: acct, Amount: 1999}}
}

// settled checks the account's settled balance and ledger entries.
func (d *demo) settled(t *testing.T, acct string, charged, refunded, entries float64) {
	t.Helper()
	b := d.balance(t, acct)
	if b["settled_charged"] != charged || b["settled_refunded"] != refunded || b["settlements"] != entries || b["settled"] != charged-refunded {
		t.Fatalf("balance %v, want %v settled charged, %v refunded, in %v ledger entries", b, charged, refunded, entries)
	}
}

// webhookCases run with apiCases, on every framework and database.
var webhookCases = []struct {
	name string
	run  func(*testing.T, *demo)
}{
	{"Webhook/AppliedOnceThenReplayed", func(t *testing.T, d *demo) {
		acct, e := d.charged(t)
		first := d.webhook(t, e)
		if first.status != 200 || first.replayed() {
			t.Fatalf("first delivery: %d replayed=%v %s", first.status, first.replayed(), first.body)
		}
		if m := first.json(t); m["event"] != e.ID || m["settles"] != e.Data.Object || m["amount"] != 1999.0 || m["type"] != payments.ChargeSettled {
			t.Fatalf("answer %v", m)
		}
		// The provider's redelivery, signed anew: the first answer again.
		again := d.webhook(t, e)
		if again.status != 200 || !again.replayed() || !bytes.Equal(again.body, first.body) {
			t.Fatalf("redelivery: %d replayed=%v %s", again.status, again.replayed(), again.body)
		}
		d.settled(t, acct, 1999, 0, 1)
		if c := d.do(t, http.MethodGet, "/v1/charges/"+e.Data.Object, acct, "", "").json(t); c["status"] != payments.StatusSettled {
			t.Fatalf("charge after its settlement: %v", c)
		}
		list := d.do(t, http.MethodGet, "/v1/settlements", acct, "", "")
		if data, _ := list.json(t)["data"].([]any); list.status != 200 || len(data) != 1 {
			t.Fatalf("settlements: %d %s", list.status, list.body)
		}
	}},
	{"Webhook/Refund", func(t *testing.T, d *demo) {
		acct, e := d.charged(t)
		r := d.do(t, http.MethodPost, "/v1/refunds", acct, newKey(), fmt.Sprintf(`{"charge":%q,"amount":500}`, e.Data.Object))
		if r.status != 201 {
			t.Fatalf("refund: %d %s", r.status, r.body)
		}
		ref := r.json(t)
		created, _ := time.Parse(time.RFC3339, ref["created"].(string))
		re := payments.Event{ID: payments.EventID(ref["id"].(string)), Type: payments.RefundSettled, Time: created,
			Data: payments.EventData{Object: ref["id"].(string), Charge: e.Data.Object, Account: acct, Amount: 500}}
		// Out of order: the refund's settlement before its charge's.
		for _, ev := range []payments.Event{re, e, re} {
			if w := d.webhook(t, ev); w.status != 200 {
				t.Fatalf("%s: %d %s", ev.Type, w.status, w.body)
			}
		}
		d.settled(t, acct, 1999, 500, 2)
	}},
	{"Webhook/ConcurrentDeliveriesApplyOnce", func(t *testing.T, d *demo) {
		acct, e := d.charged(t)
		var wg sync.WaitGroup
		answers := make([]reply, 8)
		for i := range answers {
			wg.Go(func() { answers[i] = d.webhook(t, e) })
		}
		wg.Wait()
		for _, a := range answers {
			if a.status != 200 && a.status != 409 {
				t.Fatalf("a concurrent delivery: %d %s, want 200 or 409 request-in-progress", a.status, a.body)
			}
			if a.status == 409 {
				a.problem(t, 409, exchange.ProblemInProgress)
			}
		}
		if r := d.webhook(t, e); r.status != 200 {
			t.Fatalf("delivery after the others: %d %s", r.status, r.body)
		}
		d.settled(t, acct, 1999, 0, 1)
	}},
	{"Event/WebhooksAndStreamApplyOnce", func(t *testing.T, d *demo) {
		// The same event by webhook and by the event stream's consumer
		// (API.ApplyEvent), at once: one ledger entry, which every
		// delivery gets back.
		acct, e := d.charged(t)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var results [][]byte
		for range 4 {
			wg.Go(func() {
				for {
					r := d.webhook(t, e)
					if r.status == 200 {
						mu.Lock()
						results = append(results, r.body)
						mu.Unlock()
						return
					}
					if r.status != 409 {
						t.Errorf("webhook: %d %s", r.status, r.body)
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			})
			wg.Go(func() {
				for {
					res, err := d.app.API.ApplyEvent(context.Background(), e.ID, e.Body())
					if err == nil {
						mu.Lock()
						results = append(results, res)
						mu.Unlock()
						return
					}
					if !errors.Is(err, idem.ErrInProgress) {
						t.Errorf("stream delivery: %v", err)
						return
					}
					time.Sleep(10 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		for _, r := range results {
			if !bytes.Equal(r, results[0]) {
				t.Fatalf("deliveries got %s and %s", r, results[0])
			}
		}
		d.settled(t, acct, 1999, 0, 1)
	}},
	{"Webhook/BadSignatureRecordsNothing", func(t *testing.T, d *demo) {
		acct, e := d.charged(t)
		body := e.Body()
		d.webhookAt(t, e.ID, body, webhook.NewSecret(), time.Now()).problem(t, 400, api.ProblemWebhookSignatureInvalid)
		// Signed for another body.
		other := e
		other.Data.Amount = 1
		h := http.Header{}
		h.Set(webhook.HeaderID, e.ID)
		h.Set(webhook.HeaderTimestamp, strconv.FormatInt(time.Now().Unix(), 10))
		h.Set(webhook.HeaderSignature, testSecret.Sign(e.ID, time.Now(), other.Body()))
		d.doHeader(t, http.MethodPost, api.WebhookPath, h, "", string(body)).problem(t, 400, api.ProblemWebhookSignatureInvalid)
		// No webhook-id at all: refused as unsigned before idemkit
		// would ask for a key.
		h.Del(webhook.HeaderID)
		d.doHeader(t, http.MethodPost, api.WebhookPath, h, "", string(body)).problem(t, 400, api.ProblemWebhookSignatureInvalid)
		d.settled(t, acct, 0, 0, 0)
		if r := d.webhook(t, e); r.status != 200 || r.replayed() {
			t.Fatalf("the good delivery after the bad ones: %d replayed=%v %s; the bad ones must have recorded nothing", r.status, r.replayed(), r.body)
		}
		d.settled(t, acct, 1999, 0, 1)
	}},
	{"Webhook/StaleTimestampRecordsNothing", func(t *testing.T, d *demo) {
		acct, e := d.charged(t)
		for _, off := range []time.Duration{-6 * time.Minute, 6 * time.Minute} {
			d.webhookAt(t, e.ID, e.Body(), testSecret, time.Now().Add(off)).problem(t, 400, api.ProblemWebhookTimestampStale)
		}
		d.settled(t, acct, 0, 0, 0)
		if r := d.webhookAt(t, e.ID, e.Body(), testSecret, time.Now().Add(-4*time.Minute)); r.status != 200 || r.replayed() {
			t.Fatalf("a delivery signed 4 minutes ago: %d replayed=%v %s", r.status, r.replayed(), r.body)
		}
		d.settled(t, acct, 1999, 0, 1)
	}},
	{"Webhook/NoClientReachesTheProvidersRecords", func(t *testing.T, d *demo) {
		// A client whose bearer token names the provider's scopes, with
		// the webhook's id as its Idempotency-Key, records answers of its
		// own: the signed webhook must not meet them.
		acct, e := d.charged(t)
		for _, token := range []string{api.WebhookScope, api.EventScope, "provider-webhooks", "provider-events"} {
			r := d.do(t, http.MethodPost, "/v1/charges", token, e.ID, `{"amount":0}`)
			r.problem(t, 400, api.ProblemInvalidRequest)
			if again := d.do(t, http.MethodPost, "/v1/charges", token, e.ID, `{"amount":0}`); !again.replayed() {
				t.Fatalf("the client's own 400 under %q was not recorded: the test proves nothing", token)
			}
		}
		if r := d.webhook(t, e); r.status != 200 || r.replayed() {
			t.Fatalf("the signed webhook after clients used its id: %d replayed=%v %s, want 200, applied", r.status, r.replayed(), r.body)
		}
		d.settled(t, acct, 1999, 0, 1)
	}},
	{"Webhook/ContentEncodingRefusedRecordsNothing", func(t *testing.T, d *demo) {
		// A webhook whose body is gzip-encoded, signed over the body
		// decoded (what a framework that decodes it would check) or as
		// sent: refused 415 on every framework, before idemkit, so that
		// the plain delivery of the event is applied, not refused.
		acct, e := d.charged(t)
		var zipped bytes.Buffer
		zw := gzip.NewWriter(&zipped)
		zw.Write(e.Body())
		zw.Close()
		for name, signed := range map[string][]byte{"decoded": e.Body(), "as sent": zipped.Bytes()} {
			for _, coding := range []string{"gzip", "GZIP", "identity, gzip"} {
				now := time.Now()
				h := http.Header{}
				h.Set(webhook.HeaderID, e.ID)
				h.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
				h.Set(webhook.HeaderSignature, testSecret.Sign(e.ID, now, signed))
				h.Set("Content-Encoding", coding)
				r := d.doHeader(t, http.MethodPost, api.WebhookPath, h, "", zipped.String())
				if r.problem(t, 415, api.ProblemWebhookEncodingUnsupported); r.header.Get("Accept-Encoding") != "identity" {
					t.Fatalf("signed over the body %s, Content-Encoding %q: Accept-Encoding %q, want identity", name, coding, r.header.Get("Accept-Encoding"))
				}
			}
		}
		d.settled(t, acct, 0, 0, 0)
		if r := d.webhook(t, e); r.status != 200 || r.replayed() {
			t.Fatalf("the plain delivery after the encoded ones: %d replayed=%v %s, want 200, applied", r.status, r.replayed(), r.body)
		}
		d.settled(t, acct, 1999, 0, 1)
	}},
	{"Webhook/EventRejected", func(t *testing.T, d *demo) {
		acct, e := d.charged(t)
		e.Data.Amount = 2000
		for i := range 2 {
			r := d.webhook(t, e)
			r.problem(t, 422, api.ProblemEventRejected)
			if r.replayed() != (i == 1) {
				t.Fatalf("delivery %d: replayed=%v; a refusal for good is recorded", i, r.replayed())
			}
		}
		// The stream's consumer gets the recorded refusal too.
		var perm *idem.PermanentError
		if _, err := d.app.API.ApplyEvent(context.Background(), e.ID, e.Body()); !errors.As(err, &perm) {
			t.Fatalf("the event by the stream: %v, want the recorded refusal", err)
		}
		d.settled(t, acct, 0, 0, 0)
	}},
	{"Webhook/NotAnEvent", func(t *testing.T, d *demo) {
		_, e := d.charged(t)
		d.webhookAt(t, "evt_"+newAccount(), []byte(`{"type":"charge.refunded"}`), testSecret, time.Now()).problem(t, 400, api.ProblemInvalidRequest)
		// Another payload under an id already applied.
		if r := d.webhook(t, e); r.status != 200 {
			t.Fatalf("the event: %d %s", r.status, r.body)
		}
		other := e
		other.Data.Amount = 1
		d.webhookAt(t, e.ID, other.Body(), testSecret, time.Now()).problem(t, 422, exchange.ProblemKeyReused)
		if _, err := d.app.API.ApplyEvent(context.Background(), e.ID, other.Body()); !errors.Is(err, idem.ErrKeyReused) {
			t.Fatalf("another payload by the stream: %v, want ErrKeyReused", err)
		}
	}},
	{"Settlements/Pages", func(t *testing.T, d *demo) {
		acct, e := d.charged(t)
		d.webhook(t, e)
		r := d.do(t, http.MethodPost, "/v1/charges", acct, newKey(), chargeBody)
		c := r.json(t)
		created, _ := time.Parse(time.RFC3339, c["created"].(string))
		second := payments.Event{ID: payments.EventID(c["id"].(string)), Type: payments.ChargeSettled, Time: created,
			Data: payments.EventData{Object: c["id"].(string), Account: acct, Amount: 1999}}
		d.webhook(t, second)
		page := d.do(t, http.MethodGet, "/v1/settlements?limit=1", acct, "", "").json(t)
		data := page["data"].([]any)
		if len(data) != 1 || page["has_more"] != true {
			t.Fatalf("first page %v", page)
		}
		after := strconv.Itoa(int(data[0].(map[string]any)["id"].(float64)))
		next := d.do(t, http.MethodGet, "/v1/settlements?limit=1&starting_after="+after, acct, "", "").json(t)
		if rest := next["data"].([]any); len(rest) != 1 || next["has_more"] != false || rest[0].(map[string]any)["event"] != second.ID {
			t.Fatalf("second page %v", next)
		}
		for _, q := range []string{"limit=0", "limit=101", "starting_after=x", "starting_after=-1"} {
			d.do(t, http.MethodGet, "/v1/settlements?"+q, acct, "", "").problem(t, 400, api.ProblemInvalidRequest)
		}
	}},
}
