package main

import (
	"bytes"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// stripeCharge is a charge as Stripe's SDKs send it: a form, with
// Stripe's parameter names.
const stripeCharge = "amount=1999&currency=usd&source=tok_visa&description=Order+%231&metadata[order_id]=42&metadata[note]=gift"

// form posts a form body to path as Stripe's clients do.
func (d *demo) form(t *testing.T, path, authorization, key, body string) reply {
	t.Helper()
	h := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	if authorization != "" {
		h.Set("Authorization", authorization)
	}
	req, err := http.NewRequest(http.MethodPost, d.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	r := d.doRequest(t, req)
	if r.header.Get("Request-Id") == "" || !strings.HasPrefix(r.header.Get("Request-Id"), "req_") {
		t.Fatalf("POST %s: no Request-Id (%v)", path, r.header)
	}
	return r
}

// stripeError checks a Stripe error object.
func (r reply) stripeError(t *testing.T, status int, typ, code, param string) {
	t.Helper()
	if r.status != status || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d %q, want %d application/json: %s", r.status, r.header.Get("Content-Type"), status, r.body)
	}
	e, _ := r.json(t)["error"].(map[string]any)
	if e == nil || e["type"] != typ || e["code"] != code || e["message"] == "" || (param != "" && e["param"] != param) {
		t.Fatalf("error %s, want type %s, code %s, param %q", r.body, typ, code, param)
	}
}

func sk() string { return "sk_test_" + newAccount() }

var stripeCases = []struct {
	name string
	run  func(*testing.T, *demo)
}{
	{"Stripe/ChargeThenReplay", func(t *testing.T, d *demo) {
		key, acct := newKey(), sk()
		first := d.form(t, "/v1/charges", "Bearer "+acct, key, stripeCharge)
		if first.status != 200 || first.replayed() {
			t.Fatalf("form charge: %d %s", first.status, first.body)
		}
		c := first.json(t)
		md, _ := c["metadata"].(map[string]any)
		if id, _ := c["id"].(string); !strings.HasPrefix(id, "ch_") || c["object"] != "charge" || c["amount"] != 1999.0 ||
			c["amount_captured"] != 1999.0 || c["amount_refunded"] != 0.0 || c["currency"] != "usd" || c["customer"] != nil ||
			c["payment_method"] != "tok_visa" || c["description"] != "Order #1" || c["status"] != "succeeded" ||
			c["paid"] != true || c["captured"] != true || c["refunded"] != false || c["livemode"] != false ||
			md["order_id"] != "42" || md["note"] != "gift" {
			t.Fatalf("charge %s", first.body)
		}
		if created, _ := c["created"].(float64); created < 1e9 {
			t.Fatalf("created %v, want Unix seconds", c["created"])
		}
		again := d.form(t, "/v1/charges", "Bearer "+acct, key, stripeCharge)
		if again.status != 200 || !again.replayed() || !bytes.Equal(again.body, first.body) {
			t.Fatalf("retry: %d replayed=%v %s, want %s", again.status, again.replayed(), again.body, first.body)
		}
		if again.header.Get("Request-Id") == first.header.Get("Request-Id") {
			t.Fatalf("two answers, one Request-Id")
		}
		// Basic authentication with the key as the user is the same account.
		basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(acct+":"))
		third := d.form(t, "/v1/charges", basic, key, stripeCharge)
		if third.status != 200 || !third.replayed() || !bytes.Equal(third.body, first.body) {
			t.Fatalf("retry with basic auth: %d %s", third.status, third.body)
		}
		if b, p := d.balance(t, acct), d.provider(t, acct); b["charges"] != 1.0 || b["charged"] != 1999.0 || p["authorizations"] != 1.0 {
			t.Fatalf("balance %v provider %v, want one charge of 1999", b, p)
		}
		// The JSON API shows the same charge.
		got := d.do(t, http.MethodGet, "/v1/charges/"+c["id"].(string), acct, "", "")
		if got.status != 200 || got.json(t)["customer"] != "tok_visa" {
			t.Fatalf("GET charge: %d %s", got.status, got.body)
		}
	}},
	{"Stripe/KeyReusedIsIdempotencyError", func(t *testing.T, d *demo) {
		key, acct := newKey(), sk()
		d.form(t, "/v1/charges", "Bearer "+acct, key, stripeCharge)
		for range 2 { // and the same answer again: a refusal records nothing
			r := d.form(t, "/v1/charges", "Bearer "+acct, key, strings.Replace(stripeCharge, "1999", "2999", 1))
			r.stripeError(t, 400, "idempotency_error", "idempotency_key_reused", "")
			if r.header.Get("Stripe-Should-Retry") != "false" || r.header.Get("Link") != "" {
				t.Fatalf("idempotency_error headers %v", r.header)
			}
		}
		// The same charge sent as JSON is another request (docs/policy.md).
		d.do(t, http.MethodPost, "/v1/charges", acct, key, `{"amount":1999,"currency":"usd","customer":"tok_visa","description":"Order #1"}`).
			problem(t, 422, "key-reused")
		if b := d.balance(t, acct); b["charges"] != 1.0 {
			t.Fatalf("balance %v, want one charge", b)
		}
	}},
	{"Stripe/Errors", func(t *testing.T, d *demo) {
		acct := sk()
		cases := []struct {
			body             string
			status           int
			typ, code, param string
		}{
			{"currency=usd&source=tok_visa", 400, "invalid_request_error", "parameter_invalid", "amount"},
			{"amount=12.5&currency=usd&source=tok_visa", 400, "invalid_request_error", "parameter_invalid", "amount"},
			{"amount=100&currency=usd", 400, "invalid_request_error", "parameter_missing", "customer"},
			{"amount=100&currency=USD&customer=cus_1", 400, "invalid_request_error", "parameter_invalid", "currency"},
			{"amount=100&currency=usd&customer=cus_1&capture=false", 400, "invalid_request_error", "parameter_invalid", "capture"},
			{"amount=100&currency=usd&customer=cus_1&metadata[" + strings.Repeat("k", 41) + "]=v", 400, "invalid_request_error", "parameter_invalid", "metadata[" + strings.Repeat("k", 41) + "]"},
			{"amount=100&currency=usd&customer=cus_declined", 402, "card_error", "card_declined", ""},
			{"amount=100&currency=usd&customer=%zz", 400, "invalid_request_error", "parameter_invalid", ""},
		}
		for _, c := range cases {
			key := newKey()
			first := d.form(t, "/v1/charges", "Bearer "+acct, key, c.body)
			first.stripeError(t, c.status, c.typ, c.code, c.param)
			// Recorded, as the JSON API's 400 and 402 are: a retry replays it.
			again := d.form(t, "/v1/charges", "Bearer "+acct, key, c.body)
			if !again.replayed() || !bytes.Equal(again.body, first.body) || again.status != first.status {
				t.Fatalf("%s: retry %d %s, want the replay of %s", c.body, again.status, again.body, first.body)
			}
		}
		d.form(t, "/v1/charges", "Bearer "+acct, "", stripeCharge).stripeError(t, 400, "invalid_request_error", "idempotency_key_missing", "")
		d.form(t, "/v1/charges", "Bearer "+acct, `"bad`, stripeCharge).stripeError(t, 400, "invalid_request_error", "idempotency_key_invalid", "")
		for _, auth := range []string{"", "Bearer ", "Basic " + base64.StdEncoding.EncodeToString([]byte("sk_test_x:secret"))} {
			d.form(t, "/v1/charges", auth, newKey(), stripeCharge).stripeError(t, 401, "invalid_request_error", "api_key_invalid", "")
		}
		if b := d.balance(t, acct); b["charges"] != 0.0 {
			t.Fatalf("balance %v, want no charge", b)
		}
	}},
	{"Stripe/Refunds", func(t *testing.T, d *demo) {
		acct := sk()
		c := d.form(t, "/v1/charges", "Bearer "+acct, newKey(), stripeCharge)
		id, _ := c.json(t)["id"].(string)
		key := newKey()
		body := "charge=" + url.QueryEscape(id) + "&amount=500&metadata[reason]=late"
		first := d.form(t, "/v1/refunds", "Bearer "+acct, key, body)
		ref := first.json(t)
		if rid, _ := ref["id"].(string); first.status != 200 || !strings.HasPrefix(rid, "re_") || ref["object"] != "refund" ||
			ref["amount"] != 500.0 || ref["charge"] != id || ref["status"] != "succeeded" || ref["metadata"].(map[string]any)["reason"] != "late" {
			t.Fatalf("refund: %d %s", first.status, first.body)
		}
		again := d.form(t, "/v1/refunds", "Bearer "+acct, key, body)
		if !again.replayed() || !bytes.Equal(again.body, first.body) {
			t.Fatalf("refund retry: %d %s", again.status, again.body)
		}
		d.form(t, "/v1/refunds", "Bearer "+acct, newKey(), "charge="+id+"&amount=1500").
			stripeError(t, 400, "invalid_request_error", "amount_too_large", "")
		d.form(t, "/v1/refunds", "Bearer "+acct, newKey(), "charge=ch_nosuch&amount=1").
			stripeError(t, 404, "invalid_request_error", "resource_missing", "charge")
		d.form(t, "/v1/refunds", "Bearer "+acct, newKey(), "charge="+id+"&amount=1&reason=x").
			stripeError(t, 400, "invalid_request_error", "parameter_invalid", "reason")
		if b := d.balance(t, acct); b["refunds"] != 1.0 || b["refunded"] != 500.0 {
			t.Fatalf("balance %v, want one refund of 500", b)
		}
	}},
	{"Stripe/KeyInUseShouldRetry", func(t *testing.T, d *demo) {
		acct := sk()
		for round := 0; ; round++ {
			key := newKey()
			var wg sync.WaitGroup
			replies := make([]reply, 8)
			for i := range replies {
				wg.Go(func() { replies[i] = d.form(t, "/v1/charges", "Bearer "+acct, key, stripeCharge) })
			}
			wg.Wait()
			conflicts := 0
			for _, r := range replies {
				if r.status == 409 {
					conflicts++
					r.stripeError(t, 409, "invalid_request_error", "idempotency_key_in_use", "")
					if r.header.Get("Stripe-Should-Retry") != "true" || r.header.Get("Retry-After") == "" {
						t.Fatalf("409 headers %v", r.header)
					}
				} else if r.status != 200 {
					t.Fatalf("parallel retry: %d %s", r.status, r.body)
				}
			}
			if conflicts > 0 {
				break
			}
			if round == 20 {
				t.Fatal("20 rounds of 8 parallel attempts of one key, and never a 409")
			}
		}
	}},
}
