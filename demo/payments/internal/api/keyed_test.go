package api

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit/demo/payments/internal/payments"
	"github.com/idemkit/idemkit/demo/payments/internal/testdb"
)

// forgetfulRecords serves the API behind idemkit with records kept apart
// from the database, in a store that forget empties: a Redis that lost
// what it acknowledged.
type forgetfulRecords struct {
	api     *API
	current atomic.Pointer[http.Handler]
}

func (f *forgetfulRecords) forget() {
	engine := idem.New(idem.Config{Store: memstore.New(), ProblemBase: DocsPath + "/", Logger: slog.New(slog.DiscardHandler)})
	h := idemhttp.Middleware(engine, idemhttp.WithScope(func(r *http.Request) string {
		acct, _ := Account(r.Header.Get("Authorization"))
		return acct
	}))(f.api.Handler())
	f.current.Store(&h)
}

func (f *forgetfulRecords) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*f.current.Load()).ServeHTTP(w, r)
}

// ledgerDB opens a migrated SQLite database of the test's own.
func ledgerDB(t *testing.T) *gorm.DB { return testdb.Ledger(t) }

// keyedAPI serves an API with KeyedRows on db, behind records that the
// test can make forget, and returns it, the records, and a function that
// posts body to path for account with the Idempotency-Key key.
func keyedAPI(t *testing.T, db *gorm.DB, account string) (*API, *forgetfulRecords, func(path, key, body string) (int, http.Header, string)) {
	a := &API{DB: db, Provider: &payments.Provider{}, Now: time.Now, TTL: 24 * time.Hour, Logger: slog.New(slog.DiscardHandler),
		ProblemBase: DocsPath + "/", KeyedRows: true}
	records := &forgetfulRecords{api: a}
	records.forget()
	srv := httptest.NewServer(records)
	t.Cleanup(srv.Close)
	return a, records, func(path, key, body string) (int, http.Header, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+account)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
}

// TestLostRecordAnswersTheRow: with KeyedRows, a charge or refund retried
// after its idempotency record was lost is answered as the first attempt
// was (201, the same body, the same Location), and nothing is written or
// authorized twice; the key sent with another body is refused with 422.
func TestLostRecordAnswersTheRow(t *testing.T) {
	db := ledgerDB(t)
	a, records, post := keyedAPI(t, db, "acct_keyed")
	provider := a.Provider.(*payments.Provider)
	const acct = "acct_keyed"

	const charge = `{"amount":1999,"currency":"usd","customer":"cus_1"}`
	status, h, first := post("/v1/charges", `"c-1"`, charge)
	if status != 201 || h.Get("Location") == "" {
		t.Fatalf("charge: %d %v %s", status, h, first)
	}
	location := h.Get("Location")
	var c struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(first), &c); err != nil {
		t.Fatal(err)
	}

	records.forget()
	status, h, again := post("/v1/charges", `"c-1"`, charge)
	if status != 201 || h.Get("Location") != location || again != first {
		t.Fatalf("retry after the record was lost: %d Location %q %s, want 201 Location %q %s", status, h.Get("Location"), again, location, first)
	}
	records.forget()
	if status, _, body := post("/v1/charges", `"c-1"`, `{"amount":2999,"currency":"usd","customer":"cus_1"}`); status != 422 ||
		!strings.Contains(body, DocsPath+"/"+exchange.ProblemKeyReused) {
		t.Fatalf("the key with another amount after the record was lost: %d %s, want 422 key-reused", status, body)
	}

	refund := `{"charge":"` + c.ID + `","amount":1500}`
	status, _, firstRefund := post("/v1/refunds", `"r-1"`, refund)
	if status != 201 {
		t.Fatalf("refund: %d %s", status, firstRefund)
	}
	records.forget()
	if status, _, body := post("/v1/refunds", `"r-1"`, refund); status != 201 || body != firstRefund {
		t.Fatalf("refund retried after the record was lost: %d %s, want 201 %s", status, body, firstRefund)
	}

	b, err := payments.GetBalance(t.Context(), db, acct)
	if err != nil {
		t.Fatal(err)
	}
	if b != (payments.Balance{Charged: 1999, Charges: 1, Refunded: 1500, Refunds: 1}) || provider.Counts(acct).Authorizations != 1 {
		t.Fatalf("balance %+v, %d authorizations: want one charge, one refund, one authorization", b, provider.Counts(acct).Authorizations)
	}
	if n := a.Existing.Load(); n != 2 {
		t.Fatalf("%d requests counted as answered with an existing row, want 2", n)
	}
}

// TestLostRecordAnswersAsFirstAnswered: with KeyedRows, a charge or refund
// retried after its record was lost is answered with the bytes of its
// first answer (body and Location), not with its row as it is now: by
// then the charge has been refunded and both settled, which changes their
// status and the charge's amount_refunded.
func TestLostRecordAnswersAsFirstAnswered(t *testing.T) {
	db := ledgerDB(t)
	_, records, post := keyedAPI(t, db, "acct_first_answer")
	const charge = `{"amount":1999,"currency":"usd","customer":"cus_1","description":"first"}`
	status, h, first := post("/v1/charges", `"c-1"`, charge)
	location := h.Get("Location")
	if status != 201 || location == "" || !strings.Contains(first, `"status":"succeeded"`) {
		t.Fatalf("charge: %d %q %s", status, location, first)
	}
	var c struct {
		ID string `json:"id"`
	}
	json.Unmarshal([]byte(first), &c)
	refund := `{"charge":"` + c.ID + `","amount":500}`
	status, _, firstRefund := post("/v1/refunds", `"r-1"`, refund)
	if status != 201 {
		t.Fatalf("refund: %d %s", status, firstRefund)
	}
	pending, _, err := payments.PendingEvents(t.Context(), db)
	if err != nil || len(pending) != 2 {
		t.Fatalf("pending events %+v, %v: want the charge's and the refund's", pending, err)
	}
	for _, e := range pending {
		if _, _, err := payments.ApplyEventAlone(db, e, time.Now()); err != nil {
			t.Fatal(err)
		}
	}

	records.forget()
	if status, h, again := post("/v1/charges", `"c-1"`, charge); status != 201 || h.Get("Location") != location || again != first {
		t.Fatalf("charge retried after its record was lost, once refunded and settled: %d Location %q %s, want 201 Location %q %s",
			status, h.Get("Location"), again, location, first)
	}
	if status, _, again := post("/v1/refunds", `"r-1"`, refund); status != 201 || again != firstRefund {
		t.Fatalf("refund retried after its record was lost, once settled: %d %s, want 201 %s", status, again, firstRefund)
	}
}
