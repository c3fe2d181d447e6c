package main

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/demotest"
	"github.com/idemkit/idemkit/demo/payments/internal/server"
	"github.com/idemkit/idemkit/internal/testservers"
)

// databases are the stores the demo's API is tested on. PostgreSQL and
// MariaDB come from `make test`, which starts throwaway servers and exports
// their DSNs (MariaDB's in the Go driver's form, given to the demo as the
// mysql:// URL a user would pass to -db).
func databases(t *testing.T) map[string]string {
	dbs := map[string]string{"sqlite": filepath.Join(t.TempDir(), "payments.db")}
	pg, my := testservers.Optional(t, testservers.PostgresDSN), testservers.Optional(t, testservers.MySQLDSN)
	if pg == "" || my == "" {
		return dbs // -short: SQLite only
	}
	dbs["postgres"] = pg
	dbs["mysql"] = testservers.MySQLURL(t, my)
	return dbs
}

// demo is a running demo server.
type demo struct {
	url    string
	app    *app.App
	client *http.Client // nil: http.DefaultClient
}

func start(t *testing.T, cfg app.Config) *demo {
	t.Helper()
	return startLogged(t, cfg, quietLog())
}

// startLogged is start with the demo logging to log.
func startLogged(t *testing.T, cfg app.Config, log *slog.Logger) *demo {
	t.Helper()
	a, url := demotest.Start(t, cfg, log)
	return &demo{url: url, app: a}
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", r.body, err)
	}
	return m
}

func (r reply) replayed() bool { return r.header.Get(exchange.ReplayedHeader) == "true" }

// problem checks an RFC 9457 problem of the given type name.
func (r reply) problem(t *testing.T, status int, name string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d (%s): %s", r.status, status, name, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != exchange.ProblemContentType {
		t.Fatalf("Content-Type %q, want a problem: %s", ct, r.body)
	}
	m := r.json(t)
	if m["type"] != "/docs/idempotency/"+name || m["status"] != float64(status) || m["title"] == "" || m["detail"] == "" {
		t.Fatalf("problem %v, want type /docs/idempotency/%s and status %d", m, name, status)
	}
}

func (d *demo) do(t *testing.T, method, path, account, key, body string) reply {
	t.Helper()
	h := http.Header{}
	if account != "" {
		h.Set("Authorization", "Bearer "+account)
	}
	return d.doHeader(t, method, path, h, key, body)
}

// doHeader sends a request with the given header fields, and a key and a
// JSON body if not empty.
func (d *demo) doHeader(t *testing.T, method, path string, h http.Header, key, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, d.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for name, values := range h {
		req.Header[name] = values
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	return d.doRequest(t, req)
}

// doRequest sends req with the demo's client.
func (d *demo) doRequest(t *testing.T, req *http.Request) reply {
	t.Helper()
	client := d.client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

func (d *demo) balance(t *testing.T, account string) map[string]any {
	t.Helper()
	r := d.do(t, http.MethodGet, "/v1/balance", account, "", "")
	if r.status != 200 {
		t.Fatalf("balance: %d %s", r.status, r.body)
	}
	return r.json(t)
}

// provider returns what the simulated payment provider did for account, as
// GET /debug/provider reports it.
func (d *demo) provider(t *testing.T, account string) map[string]any {
	t.Helper()
	r := d.do(t, http.MethodGet, "/debug/provider", account, "", "")
	if r.status != 200 {
		t.Fatalf("provider counts: %d %s", r.status, r.body)
	}
	return r.json(t)
}

func newAccount() string { return "acct_" + rand.Text()[:10] }
func newKey() string     { return `"` + rand.Text() + `"` }

// TestAPI runs the whole API, and the receipt of the provider's webhooks,
// on every framework and database.
func TestAPI(t *testing.T) {
	for dbName, db := range databases(t) {
		for _, fw := range server.Frameworks {
			t.Run(fw+"/"+dbName, func(t *testing.T) {
				cfg := app.DefaultConfig()
				cfg.Framework, cfg.DB, cfg.ProviderLatency = fw, db, 20*time.Millisecond
				cfg.WebhookSecret = testSecret.String()
				d := start(t, cfg)
				for _, c := range append(append(apiCases, webhookCases...), stripeCases...) {
					t.Run(c.name, func(t *testing.T) { c.run(t, d) })
				}
			})
		}
	}
}

const chargeBody = `{"amount":1999,"currency":"usd","customer":"cus_42","description":"Order #1"}`

var apiCases = []struct {
	name string
	run  func(*testing.T, *demo)
}{
	{"Health", func(t *testing.T, d *demo) {
		if r := d.do(t, http.MethodGet, "/healthz", "", "", ""); r.status != 200 {
			t.Fatalf("healthz: %d", r.status)
		}
	}},
	{"Charge/CreatedOnceThenReplayed", func(t *testing.T, d *demo) {
		acct, key := newAccount(), newKey()
		first := d.do(t, http.MethodPost, "/v1/charges", acct, key, chargeBody)
		if first.status != 201 || first.replayed() {
			t.Fatalf("first: %d %s", first.status, first.body)
		}
		c := first.json(t)
		id, _ := c["id"].(string)
		if !strings.HasPrefix(id, "ch_") || c["object"] != "charge" || c["amount"] != 1999.0 || c["currency"] != "usd" ||
			c["customer"] != "cus_42" || c["description"] != "Order #1" || c["status"] != "succeeded" {
			t.Fatalf("charge %v", c)
		}
		if _, err := time.Parse(time.RFC3339, c["created"].(string)); err != nil {
			t.Fatalf("created %v: %v", c["created"], err)
		}
		if first.header.Get("Location") != "/v1/charges/"+id {
			t.Fatalf("Location %q", first.header.Get("Location"))
		}
		// Reordered JSON with other whitespace is the same request.
		again := d.do(t, http.MethodPost, "/v1/charges", acct, key, `{ "description":"Order #1", "customer":"cus_42","currency":"usd","amount":1999 }`)
		if again.status != 201 || !again.replayed() || !bytes.Equal(again.body, first.body) || again.header.Get("Location") != first.header.Get("Location") {
			t.Fatalf("retry: %d replayed=%v %s", again.status, again.replayed(), again.body)
		}
		if b := d.balance(t, acct); b["charges"] != 1.0 || b["charged"] != 1999.0 {
			t.Fatalf("balance %v, want one charge of 1999", b)
		}
		got := d.do(t, http.MethodGet, "/v1/charges/"+id, acct, "", "")
		if got.status != 200 || got.json(t)["id"] != id {
			t.Fatalf("GET charge: %d %s", got.status, got.body)
		}
		list := d.do(t, http.MethodGet, "/v1/charges", acct, "", "")
		if data, _ := list.json(t)["data"].([]any); list.status != 200 || len(data) != 1 {
			t.Fatalf("list: %d %s", list.status, list.body)
		}
		// Another account sees nothing of it.
		d.do(t, http.MethodGet, "/v1/charges/"+id, newAccount(), "", "").problem(t, 404, "not-found")
	}},
	{"Charge/KeyReused", func(t *testing.T, d *demo) {
		acct, key := newAccount(), newKey()
		d.do(t, http.MethodPost, "/v1/charges", acct, key, chargeBody)
		d.do(t, http.MethodPost, "/v1/charges", acct, key, strings.Replace(chargeBody, "1999", "2999", 1)).problem(t, 422, "key-reused")
		if b := d.balance(t, acct); b["charges"] != 1.0 {
			t.Fatalf("balance %v", b)
		}
	}},
	{"Charge/SameKeyOtherAccount", func(t *testing.T, d *demo) {
		key := newKey()
		a := d.do(t, http.MethodPost, "/v1/charges", newAccount(), key, chargeBody)
		b := d.do(t, http.MethodPost, "/v1/charges", newAccount(), key, chargeBody)
		if a.status != 201 || b.status != 201 || b.replayed() || a.json(t)["id"] == b.json(t)["id"] {
			t.Fatalf("two accounts, one key: %d %s / %d %s", a.status, a.body, b.status, b.body)
		}
	}},
	{"Charge/NoKey", func(t *testing.T, d *demo) {
		d.do(t, http.MethodPost, "/v1/charges", newAccount(), "", chargeBody).problem(t, 400, "key-missing")
		d.do(t, http.MethodPost, "/v1/charges", newAccount(), `"bad`, chargeBody).problem(t, 400, "key-invalid")
	}},
	{"Charge/Unauthorized", func(t *testing.T, d *demo) {
		key := newKey()
		for _, auth := range []string{"", "Basic YWxhZGRpbjpvcGVuc2VzYW1l", "Bearer ", "Bearer    "} {
			r := d.doHeader(t, http.MethodPost, "/v1/charges", http.Header{"Authorization": {auth}}, key, chargeBody)
			r.problem(t, 401, "unauthorized")
			// RFC 9110: a 401 names the scheme the client should use.
			if got := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Fatalf("401 with Authorization %q: WWW-Authenticate %q, want the Bearer scheme", auth, got)
			}
		}
		for _, path := range []string{"/v1/balance", "/v1/charges", "/debug/provider"} {
			r := d.do(t, http.MethodGet, path, "", "", "")
			r.problem(t, 401, "unauthorized")
			if got := r.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
				t.Fatalf("GET %s without a token: WWW-Authenticate %q, want the Bearer scheme", path, got)
			}
		}
		// Nothing was recorded for the key: the authenticated request runs.
		if r := d.do(t, http.MethodPost, "/v1/charges", newAccount(), key, chargeBody); r.status != 201 || r.replayed() {
			t.Fatalf("after a 401: %d replayed=%v", r.status, r.replayed())
		}
	}},
	{"Charge/InvalidBodyIsRecorded", func(t *testing.T, d *demo) {
		acct, key := newAccount(), newKey()
		for i, body := range []string{`{"amount":0,"currency":"usd","customer":"c"}`, `{"amount":0,"currency":"usd","customer":"c"}`} {
			r := d.do(t, http.MethodPost, "/v1/charges", acct, key, body)
			r.problem(t, 400, "invalid-request")
			if r.replayed() != (i == 1) {
				t.Fatalf("attempt %d replayed=%v", i, r.replayed())
			}
		}
		for _, body := range []string{`{"amount":5,"currency":"USD","customer":"c"}`, `{"amount":5,"currency":"usd","customer":""}`, `not json`} {
			d.do(t, http.MethodPost, "/v1/charges", acct, newKey(), body).problem(t, 400, "invalid-request")
		}
		if b := d.balance(t, acct); b["charges"] != 0.0 {
			t.Fatalf("balance %v", b)
		}
	}},
	{"Invalid/NamesWhatIsWrongNeverGoTypes", func(t *testing.T, d *demo) {
		// Each refusal is an invalid-request problem whose "errors" name
		// the members, query parameters or header at fault (JSON
		// Pointers as in RFC 9457's example), in JSON's terms: nothing
		// of the Go types the body is decoded into.
		acct := newAccount()
		goNames := regexp.MustCompile(`Go |payments\.|ChargeRequest|RefundRequest|int64|json:|struct`)
		check := func(t *testing.T, r reply, want ...string) {
			t.Helper()
			r.problem(t, 400, "invalid-request")
			if goNames.Match(r.body) {
				t.Fatalf("the problem speaks of Go types: %s", r.body)
			}
			var p struct {
				Errors []map[string]string `json:"errors"`
			}
			if err := json.Unmarshal(r.body, &p); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range p.Errors {
				if e["detail"] == "" || len(e) != 2 {
					t.Fatalf("errors entry %v: want one of pointer, parameter or header, and a detail: %s", e, r.body)
				}
				got = append(got, e["pointer"]+e["parameter"]+e["header"])
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("errors name %q, want %q: %s", got, want, r.body)
			}
		}
		for _, c := range []struct {
			path, body string
			want       []string
		}{
			{"/v1/charges", `[]`, []string{"#"}},
			{"/v1/charges", `"a charge"`, []string{"#"}},
			{"/v1/charges", ``, []string{"#"}},
			{"/v1/charges", `not json`, []string{"#"}},
			{"/v1/charges", `{"amount":12,"currency":"usd"`, []string{"#"}},
			{"/v1/charges", `{"amount":12,"currency":"usd","customer":"c"} {}`, []string{"#"}},
			{"/v1/charges", `{"amount":12,"currency":"usd","customer":"c"}}`, []string{"#"}},
			{"/v1/charges", `{"description":"` + strings.Repeat("x", 70_000) + `"}`, []string{"#"}},
			{"/v1/charges", `{"amount":"12","currency":"usd","customer":"c"}`, []string{"#/amount"}},
			{"/v1/charges", `{"amount":12.5,"currency":"usd","customer":"c"}`, []string{"#/amount"}},
			{"/v1/charges", `{"amount":12,"currency":["usd"],"customer":"c"}`, []string{"#/currency"}},
			{"/v1/charges", `{"amount":12,"currency":"usd","customer":{"id":"c"}}`, []string{"#/customer"}},
			{"/v1/charges", `{"amount":12,"currency":"usd","customer":"c","colour":"red"}`, []string{"#/colour"}},
			{"/v1/charges", `{"amount":12,"currency":"usd","customer":"c","a/b~":1}`, []string{"#/a~1b~0"}},
			{"/v1/charges", `{"amount":0,"currency":"USD","customer":" "}`, []string{"#/amount", "#/currency", "#/customer"}},
			{"/v1/refunds", `{"charge":5,"amount":1}`, []string{"#/charge"}},
			{"/v1/refunds", `{"amount":-1}`, []string{"#/charge", "#/amount"}},
		} {
			check(t, d.do(t, http.MethodPost, c.path, acct, newKey(), c.body), c.want...)
		}
		check(t, d.do(t, http.MethodGet, "/v1/charges?limit=many", acct, "", ""), "limit")
		check(t, d.do(t, http.MethodGet, "/v1/charges?starting_after=ch_nope", acct, "", ""), "starting_after")
		check(t, d.do(t, http.MethodGet, "/v1/balance", newAccount()+"\xff\xfe", "", ""), "Authorization")
	}},
	{"Charge/UnstorableInputRefusedBeforeTheProvider", func(t *testing.T, d *demo) {
		// Each passes a naive check but cannot be written on some database
		// (PostgreSQL refuses NUL and invalid UTF-8, the columns hold 200
		// characters): it must be refused, and recorded, before the
		// provider is asked for money.
		long := newAccount()
		long += strings.Repeat("x", 201-len(long))
		for name, c := range map[string]struct{ account, body string }{
			"nul in customer":    {newAccount(), `{"amount":500,"currency":"usd","customer":"cus\u0000x"}`},
			"nul in description": {newAccount(), `{"amount":500,"currency":"usd","customer":"cus_1","description":"a\u0000b"}`},
			"account too long":   {long, chargeBody},
			"account not UTF-8":  {newAccount() + "\xff\xfe", chargeBody},
			"amount beyond sums": {newAccount(), `{"amount":4611686018427387904,"currency":"usd","customer":"cus_1"}`},
		} {
			t.Run(name, func(t *testing.T) {
				key := newKey()
				for i := range 2 {
					r := d.do(t, http.MethodPost, "/v1/charges", c.account, key, c.body)
					r.problem(t, 400, "invalid-request")
					if r.replayed() != (i == 1) {
						t.Fatalf("attempt %d replayed=%v: the refusal must be recorded", i, r.replayed())
					}
				}
				if p := d.provider(t, c.account); p["calls"] != 0.0 {
					t.Fatalf("the provider was called for a charge that cannot be written: %v", p)
				}
				// The account's other endpoints answer 400 too, never 500.
				for _, path := range []string{"/v1/balance", "/v1/charges", "/v1/charges/ch_X"} {
					if r := d.do(t, http.MethodGet, path, c.account, "", ""); r.status >= 500 {
						t.Fatalf("GET %s: %d %s", path, r.status, r.body)
					}
				}
			})
		}
	}},
	{"Charge/AnyUnicodeTextIsKept", func(t *testing.T, d *demo) {
		acct := newAccount()
		body := `{"amount":700,"currency":"eur","customer":"cus_日本語","description":"Überweisung — 5 € 🎉"}`
		r := d.do(t, http.MethodPost, "/v1/charges", acct, newKey(), body)
		if r.status != 201 {
			t.Fatalf("charge with non-Latin text: %d %s", r.status, r.body)
		}
		got := d.do(t, http.MethodGet, "/v1/charges/"+r.json(t)["id"].(string), acct, "", "").json(t)
		if got["customer"] != "cus_日本語" || got["description"] != "Überweisung — 5 € 🎉" {
			t.Fatalf("text came back as %q / %q", got["customer"], got["description"])
		}
	}},
	{"Charge/AccountsDifferingInCaseAreApart", func(t *testing.T, d *demo) {
		upper := "ACCT_" + rand.Text()[:10]
		lower := strings.ToLower(upper)
		for _, acct := range []string{upper, lower} {
			if r := d.do(t, http.MethodPost, "/v1/charges", acct, newKey(), chargeBody); r.status != 201 {
				t.Fatalf("charge for %s: %d %s", acct, r.status, r.body)
			}
		}
		list := d.do(t, http.MethodGet, "/v1/charges", lower, "", "")
		data, _ := list.json(t)["data"].([]any)
		if len(data) != 1 {
			t.Fatalf("%s lists %d charges, want its own 1: %s", lower, len(data), list.body)
		}
		id, _ := data[0].(map[string]any)["id"].(string)
		if b := d.balance(t, upper); b["charges"] != 1.0 {
			t.Fatalf("%s sees %v charges, want its own 1", upper, b["charges"])
		}
		d.do(t, http.MethodGet, "/v1/charges/"+id, upper, "", "").problem(t, 404, "not-found")
		d.do(t, http.MethodGet, "/v1/charges/"+strings.ToLower(id), lower, "", "").problem(t, 404, "not-found")
	}},
	{"Charge/DatabaseFailureAfterTheProvider", func(t *testing.T, d *demo) {
		// The charge row cannot be written (its table is away): every
		// attempt fails with 500 after the provider answered, and is
		// retried with the same key. The provider, given the request's
		// idempotency key, takes the money once.
		acct, key := newAccount(), newKey()
		rename := func(from, to string) {
			t.Helper()
			if err := d.app.DB.Exec("ALTER TABLE " + from + " RENAME TO " + to).Error; err != nil {
				t.Fatal(err)
			}
		}
		rename("charges", "charges_away")
		restored := false
		defer func() {
			if !restored {
				rename("charges_away", "charges")
			}
		}()
		for range 3 {
			d.do(t, http.MethodPost, "/v1/charges", acct, key, chargeBody).problem(t, 500, "internal-error")
		}
		rename("charges_away", "charges")
		restored = true
		if r := d.do(t, http.MethodPost, "/v1/charges", acct, key, chargeBody); r.status != 201 || r.replayed() {
			t.Fatalf("after the database came back: %d %s", r.status, r.body)
		}
		if p, b := d.provider(t, acct), d.balance(t, acct); p["authorizations"] != 1.0 || b["charges"] != 1.0 {
			t.Fatalf("provider %v, balance %v: want 1 authorization for 1 charge", p, b)
		}
	}},
	{"Charge/ListPages", func(t *testing.T, d *demo) {
		acct := newAccount()
		// Within a second or two: their times tie, and their ids are
		// random, yet they list newest first.
		var made []string
		for range 5 {
			made = append([]string{d.do(t, http.MethodPost, "/v1/charges", acct, newKey(), chargeBody).json(t)["id"].(string)}, made...)
		}
		page := func(query string) ([]string, bool) {
			t.Helper()
			r := d.do(t, http.MethodGet, "/v1/charges"+query, acct, "", "")
			var l struct {
				Data    []struct{ ID string }
				HasMore bool `json:"has_more"`
			}
			if err := json.Unmarshal(r.body, &l); r.status != 200 || err != nil {
				t.Fatalf("GET /v1/charges%s: %d %s", query, r.status, r.body)
			}
			var ids []string
			for _, c := range l.Data {
				ids = append(ids, c.ID)
			}
			return ids, l.HasMore
		}
		all, more := page("")
		if strings.Join(all, ",") != strings.Join(made, ",") || more {
			t.Fatalf("one page of all: %v, has_more=%v; want newest first: %v", all, more, made)
		}
		var paged []string
		for query := "?limit=2"; ; {
			ids, more := page(query)
			paged = append(paged, ids...)
			if !more {
				break
			}
			if len(paged) > 5 {
				t.Fatalf("pages never end: %v", paged)
			}
			query = "?limit=2&starting_after=" + ids[len(ids)-1]
		}
		if strings.Join(paged, ",") != strings.Join(all, ",") {
			t.Fatalf("pages of 2 gave %v, one page gave %v", paged, all)
		}
		for _, q := range []string{"?limit=0", "?limit=101", "?limit=x", "?starting_after=ch_nope", "?starting_after=" + all[0] + "%00"} {
			d.do(t, http.MethodGet, "/v1/charges"+q, acct, "", "").problem(t, 400, "invalid-request")
		}
		// Another account's charge is no cursor.
		d.do(t, http.MethodGet, "/v1/charges?starting_after="+all[0], newAccount(), "", "").problem(t, 400, "invalid-request")
	}},
	{"Charge/DeclinedIsRecorded", func(t *testing.T, d *demo) {
		acct, key := newAccount(), newKey()
		body := `{"amount":500,"currency":"eur","customer":"cus_declined"}`
		d.do(t, http.MethodPost, "/v1/charges", acct, key, body).problem(t, 402, "card-declined")
		again := d.do(t, http.MethodPost, "/v1/charges", acct, key, body)
		again.problem(t, 402, "card-declined")
		if !again.replayed() {
			t.Fatal("a declined charge was not replayed")
		}
		if b := d.balance(t, acct); b["charges"] != 0.0 {
			t.Fatalf("balance %v", b)
		}
	}},
	{"Refund", func(t *testing.T, d *demo) {
		acct := newAccount()
		id := d.do(t, http.MethodPost, "/v1/charges", acct, newKey(), chargeBody).json(t)["id"].(string)
		key := newKey()
		refund := fmt.Sprintf(`{"charge":%q,"amount":999}`, id)
		r := d.do(t, http.MethodPost, "/v1/refunds", acct, key, refund)
		if r.status != 201 || r.json(t)["object"] != "refund" || r.json(t)["charge"] != id {
			t.Fatalf("refund: %d %s", r.status, r.body)
		}
		if again := d.do(t, http.MethodPost, "/v1/refunds", acct, key, refund); !again.replayed() || !bytes.Equal(again.body, r.body) {
			t.Fatalf("refund retry: %d %s", again.status, again.body)
		}
		d.do(t, http.MethodPost, "/v1/refunds", acct, newKey(), fmt.Sprintf(`{"charge":%q,"amount":1001}`, id)).problem(t, 400, "refund-too-large")
		d.do(t, http.MethodPost, "/v1/refunds", acct, newKey(), `{"charge":"ch_nope","amount":1}`).problem(t, 404, "not-found")
		d.do(t, http.MethodPost, "/v1/refunds", acct, newKey(), `{"charge":"ch_\u0000","amount":1}`).problem(t, 404, "not-found")
		d.do(t, http.MethodGet, "/v1/charges/ch_%00", acct, "", "").problem(t, 404, "not-found")
		d.do(t, http.MethodPost, "/v1/refunds", newAccount(), newKey(), refund).problem(t, 404, "not-found")
		if b := d.balance(t, acct); b["charged"] != 1999.0 || b["refunded"] != 999.0 || b["refunds"] != 1.0 {
			t.Fatalf("balance %v", b)
		}
	}},
	{"Charge/ParallelRetriesChargeOnce", func(t *testing.T, d *demo) {
		acct, key := newAccount(), newKey()
		var wg sync.WaitGroup
		replies := make([]reply, 20)
		for i := range replies {
			wg.Go(func() { replies[i] = d.do(t, http.MethodPost, "/v1/charges", acct, key, chargeBody) })
		}
		wg.Wait()
		fresh := 0
		for _, r := range replies {
			switch {
			case r.status == 201 && !r.replayed():
				fresh++
			case r.status == 201, r.status == 409:
			default:
				t.Fatalf("parallel retry: %d %s", r.status, r.body)
			}
		}
		if b := d.balance(t, acct); fresh != 1 || b["charges"] != 1.0 {
			t.Fatalf("%d fresh answers, balance %v: want exactly one charge", fresh, b)
		}
	}},
	{"DebugProvider", func(t *testing.T, d *demo) {
		acct := newAccount()
		if c := d.provider(t, acct); c["calls"] != 0.0 || c["authorizations"] != 0.0 {
			t.Fatalf("a new account's provider counts: %v", c)
		}
		d.do(t, http.MethodPost, "/v1/charges", acct, newKey(), chargeBody)
		d.do(t, http.MethodPost, "/v1/charges", acct, newKey(), `{"amount":500,"currency":"eur","customer":"cus_declined"}`)
		if c := d.provider(t, acct); c["calls"] != 2.0 || c["authorizations"] != 1.0 {
			t.Fatalf("after a charge and a decline: %v, want 2 calls and 1 authorization", c)
		}
		if c := d.provider(t, newAccount()); c["calls"] != 0.0 {
			t.Fatalf("another account sees counts: %v", c)
		}
		d.do(t, http.MethodGet, "/debug/provider", "", "", "").problem(t, 401, "unauthorized")
	}},
	{"DebugProvider/CountsOutliveTheRequestBuffers", func(t *testing.T, d *demo) {
		// Fiber hands the API header values that alias buffers it reuses
		// for the connection's next request, so what the provider keeps
		// about a charge (its account) must be its own copy: another
		// account's request on that connection must not turn one account's
		// counts into another's. The counts are read on another connection,
		// which leaves the first one's buffers as the last request left them.
		one := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
		defer one.CloseIdleConnections()
		shared := &demo{url: d.url, app: d.app, client: one}
		a, b := newAccount(), newAccount() // one length: one place in the buffer
		for _, acct := range []string{a, b} {
			if r := shared.do(t, http.MethodPost, "/v1/charges", acct, newKey(), chargeBody); r.status != 201 {
				t.Fatalf("charge for %s: %d %s", acct, r.status, r.body)
			}
		}
		for _, acct := range []string{a, b} {
			if p := d.provider(t, acct); p["calls"] != 1.0 || p["authorizations"] != 1.0 {
				t.Fatalf("%s's provider counts after two accounts charged on one connection: %v, want 1 call and 1 authorization", acct, p)
			}
		}
	}},
	{"Docs", func(t *testing.T, d *demo) {
		for _, path := range []string{"/docs/idempotency", "/docs/idempotency/key-reused"} {
			r := d.do(t, http.MethodGet, path, "", "", "")
			if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") || !bytes.Contains(r.body, []byte("Idempotency-Key")) || !bytes.Contains(r.body, []byte("24 hours")) {
				t.Fatalf("%s: %d %s", path, r.status, r.header.Get("Content-Type"))
			}
		}
	}},
	{"Routes/WrongMethodIs405WithAllow", func(t *testing.T, d *demo) {
		acct := newAccount()
		for path, allow := range map[string]string{
			"/v1/charges":                  "GET, HEAD, POST",
			"/v1/charges/ch_X":             "GET, HEAD",
			"/v1/refunds":                  "POST",
			"/v1/balance":                  "GET, HEAD",
			"/healthz":                     "GET, HEAD",
			"/metrics":                     "GET, HEAD",
			"/debug/provider":              "GET, HEAD",
			"/docs/idempotency":            "GET, HEAD",
			"/docs/idempotency/key-reused": "GET, HEAD",
			"/":                            "GET, HEAD",
			"/checkout.js":                 "GET, HEAD",
			"/checkout.css":                "GET, HEAD",
		} {
			for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead, http.MethodOptions} {
				if strings.Contains(", "+allow+", ", ", "+method+", ") {
					continue
				}
				// Each with an account and a fresh key: the method is
				// refused before authentication and idemkit look at it.
				r := d.do(t, method, path, acct, newKey(), `{}`)
				if r.status != 405 || r.header.Get("Allow") != allow {
					t.Fatalf("%s %s: %d, Allow %q; want 405 and Allow %q: %s", method, path, r.status, r.header.Get("Allow"), allow, r.body)
				}
				if method != http.MethodHead {
					r.problem(t, 405, "method-not-allowed")
				}
			}
		}
		// No key and no token: still 405, not 400 key-missing or 401.
		d.do(t, http.MethodPost, "/v1/balance", "", "", "").problem(t, 405, "method-not-allowed")
		// A key sent with a refused method records nothing: it still
		// makes a charge afterwards (a recorded 405 would make it 422).
		key := newKey()
		d.do(t, http.MethodPost, "/v1/balance", acct, key, chargeBody).problem(t, 405, "method-not-allowed")
		if r := d.do(t, http.MethodPost, "/v1/charges", acct, key, chargeBody); r.status != 201 || r.replayed() {
			t.Fatalf("a charge with the key of a refused request: %d %s", r.status, r.body)
		}
	}},
	{"Routes/HeadIsGetWithoutABody", func(t *testing.T, d *demo) {
		// Every path that answers GET answers HEAD the same way, without
		// the body: the checkout page's files, the policy page, and the
		// API's own GET endpoints.
		acct := newAccount()
		id := d.do(t, http.MethodPost, "/v1/charges", acct, newKey(), chargeBody).json(t)["id"].(string)
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		for _, path := range []string{"/", "/checkout.js", "/checkout.css", "/healthz", "/docs/idempotency", "/docs/idempotency/key-reused",
			"/docs/idempotency/nope", "/metrics", "/debug/provider", "/v1/balance", "/v1/charges", "/v1/charges/" + id} {
			for _, account := range []string{acct, ""} {
				send := func(method string) reply {
					t.Helper()
					return (&demo{url: d.url, app: d.app, client: noFollow}).do(t, method, path, account, "", "")
				}
				get, head := send(http.MethodGet), send(http.MethodHead)
				if head.status != get.status || head.header.Get("Content-Type") != get.header.Get("Content-Type") ||
					head.header.Get("Location") != get.header.Get("Location") || len(head.body) != 0 {
					t.Fatalf("HEAD %s (account %q): %d %q, %d bytes; GET: %d %q", path, account,
						head.status, head.header.Get("Content-Type"), len(head.body), get.status, get.header.Get("Content-Type"))
				}
				if n := head.header.Get("Content-Length"); path != "/metrics" && n != "" && n != strconv.Itoa(len(get.body)) {
					t.Fatalf("HEAD %s: Content-Length %s, GET's body has %d bytes", path, n, len(get.body))
				}
			}
		}
	}},
	{"Routes/UnknownPathIs404", func(t *testing.T, d *demo) {
		acct := newAccount()
		for _, path := range []string{"/nope", "/v1", "/v1/", "/v1/nope", "/v1/charges/", "/v1/charges/ch_X/refunds", "/v1//charges", "/healthz/x"} {
			for _, method := range []string{http.MethodGet, http.MethodPost} {
				// Without a key: 404, not 400 key-missing.
				d.do(t, method, path, acct, "", "").problem(t, 404, "not-found")
			}
		}
		// With a key: 404, and nothing recorded under the key.
		key := newKey()
		d.do(t, http.MethodPost, "/v1/nope", acct, key, chargeBody).problem(t, 404, "not-found")
		if r := d.do(t, http.MethodPost, "/v1/charges", acct, key, chargeBody); r.status != 201 || r.replayed() {
			t.Fatalf("a charge with the key of a request to no endpoint: %d %s", r.status, r.body)
		}
	}},
	{"Docs/ProblemTypesResolveToAnchors", func(t *testing.T, d *demo) {
		page := d.do(t, http.MethodGet, "/docs/idempotency", "", "", "")
		if page.status != 200 {
			t.Fatalf("policy page: %d", page.status)
		}
		noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		for _, name := range problemNames() {
			typeURI := "/docs/idempotency/" + name
			resp, err := noFollow.Get(d.url + typeURI)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/docs/idempotency#"+name {
				t.Errorf("GET %s: %d Location %q, want 303 to /docs/idempotency#%s", typeURI, resp.StatusCode, resp.Header.Get("Location"), name)
			}
			if !bytes.Contains(page.body, []byte(`id="`+name+`"`)) {
				t.Errorf("the policy page has no anchor %q for the problem type %s", name, typeURI)
			}
		}
		for _, path := range []string{"/docs/idempotency/nope", "/docs/idempotency/", "/docs/idempotency/key-reused/x"} {
			d.do(t, http.MethodGet, path, "", "", "").problem(t, 404, "not-found")
		}
	}},
	{"CheckoutPage", func(t *testing.T, d *demo) {
		for path, ctype := range map[string]string{"/": "text/html", "/checkout.js": "text/javascript", "/checkout.css": "text/css"} {
			r := d.do(t, http.MethodGet, path, "", "", "")
			if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), ctype) || len(r.body) == 0 {
				t.Fatalf("GET %s: %d %q", path, r.status, r.header.Get("Content-Type"))
			}
			if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
				t.Fatalf("GET %s: Content-Security-Policy %q", path, csp)
			}
		}
		page := d.do(t, http.MethodGet, "/", "", "", "")
		for _, want := range []string{`src="/checkout.js"`, `href="/checkout.css"`, `id="pay"`, `id="timeline"`, `id="flaky"`} {
			if !bytes.Contains(page.body, []byte(want)) {
				t.Fatalf("the checkout page lacks %s", want)
			}
		}
		d.do(t, http.MethodGet, "/index.html", "", "", "").problem(t, 404, "not-found")
	}},
	{"Metrics", func(t *testing.T, d *demo) {
		r := d.do(t, http.MethodGet, "/metrics", "", "", "")
		if r.status != 200 || !bytes.Contains(r.body, []byte("idemkit_")) {
			t.Fatalf("metrics: %d %.300s", r.status, r.body)
		}
	}},
}

// TestProviderFailureIsNotRecorded: a transient provider failure charges
// nothing and is not stored, so the retry runs again.
func TestProviderFailureIsNotRecorded(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.DB, cfg.ProviderLatency, cfg.ProviderFailureRate = filepath.Join(t.TempDir(), "p.db"), 0, 1
	d := start(t, cfg)
	acct, key := newAccount(), newKey()
	for range 2 {
		r := d.do(t, http.MethodPost, "/v1/charges", acct, key, chargeBody)
		r.problem(t, 503, "provider-unavailable")
		if r.header.Get("Retry-After") != "1" {
			t.Fatalf("503 with Retry-After %q, want 1", r.header.Get("Retry-After"))
		}
		if r.replayed() {
			t.Fatal("a provider failure was stored")
		}
	}
	if b := d.balance(t, acct); b["charges"] != 0.0 {
		t.Fatalf("balance %v", b)
	}
}

// problemNames are the names of every problem type the demo answers with:
// idemkit's and the demo's own.
func problemNames() []string {
	return append([]string{
		exchange.ProblemKeyMissing, exchange.ProblemKeyInvalid, exchange.ProblemKeyReused, exchange.ProblemInProgress,
		exchange.ProblemPayloadTooLarge, exchange.ProblemStoreUnavailable, exchange.ProblemBodyUnreadable, exchange.ProblemStoreFull,
	}, api.ProblemNames()...)
}
