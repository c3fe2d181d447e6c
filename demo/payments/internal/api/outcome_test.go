package api

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"

	"github.com/idemkit/idemkit/demo/payments/internal/payments"
	"github.com/idemkit/idemkit/demo/payments/internal/webhook"
)

// TestEventOutcomes: the stream's consumer and the webhook receiver map
// every outcome of applying an event: an event applied whose record could
// not be kept (idem.ErrNotRecorded) is applied, acknowledged and answered
// 200 with its entry, never delivered again as if it had failed; one whose
// key another run took over (idem.ErrLockLost), or whose work was undone
// (idem.ErrRolledBack), is delivered again: left pending, and answered 503
// with Retry-After, never 500.
func TestEventOutcomes(t *testing.T) {
	db := ledgerDB(t)
	secret := webhook.NewSecret()
	for _, c := range []struct {
		name    string
		err     error
		ack     bool
		status  int
		problem string
	}{
		{"not-recorded", errors.New("redis: connection refused"), true, http.StatusOK, ""},
		{"lock-lost", idem.ErrLockLost, false, http.StatusServiceUnavailable, ProblemLeaseLost},
		{"rolled-back", idem.ErrRolledBack, false, http.StatusServiceUnavailable, ProblemDatabaseUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			engine := idem.New(idem.Config{Store: idemtest.CompletionsFail(memstore.New(), c.err), ProblemBase: DocsPath + "/",
				Logger: slog.New(slog.DiscardHandler)})
			a := &API{DB: db, Provider: &payments.Provider{}, Now: time.Now, TTL: 24 * time.Hour, Logger: slog.New(slog.DiscardHandler),
				ProblemBase: DocsPath + "/", KeyedRows: true, Engine: engine, WebhookSecret: secret}
			acct := "acct_" + c.name
			event := func() payments.Event {
				ch := payments.Charge{ID: "ch_" + strings.ToUpper(c.name) + "_" + strconv.FormatInt(time.Now().UnixNano(), 36), Account: acct,
					Amount: 700, Currency: "usd", Customer: "cus_1", Status: payments.StatusSucceeded, Created: time.Now().UTC().Truncate(time.Second)}
				if err := db.Create(&ch).Error; err != nil {
					t.Fatal(err)
				}
				return payments.Event{ID: payments.EventID(ch.ID), Type: payments.ChargeSettled, Time: ch.Created,
					Data: payments.EventData{Object: ch.ID, Account: acct, Amount: 700}}
			}

			e := event()
			if ack := a.ConsumeEvent(t.Context(), e.ID, e.Body()); ack != c.ack {
				t.Errorf("the stream's consumer: acknowledged %v, want %v", ack, c.ack)
			}

			e = event()
			req := httptest.NewRequest(http.MethodPost, WebhookPath, strings.NewReader(string(e.Body())))
			req.Header.Set(webhook.HeaderID, e.ID)
			rec := httptest.NewRecorder()
			a.WebhookHandler().ServeHTTP(rec, req)
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != c.status || (c.problem != "" && !strings.Contains(string(body), DocsPath+"/"+c.problem)) ||
				(c.status == http.StatusServiceUnavailable && rec.Header().Get("Retry-After") == "") {
				t.Errorf("the webhook: %d %s (Retry-After %q), want %d %s", rec.Code, body, rec.Header().Get("Retry-After"), c.status, c.problem)
			}
			if c.status == http.StatusOK && !strings.Contains(string(body), `"settles":"`+e.Data.Object+`"`) {
				t.Errorf("the webhook's 200 carries %s, want the entry settling %s", body, e.Data.Object)
			}
			if c.ack {
				// A refusal for good whose record could not be kept is
				// still one: acknowledged, and 422 event-rejected.
				e = event()
				e.Data.Amount++
				if !a.ConsumeEvent(t.Context(), e.ID, e.Body()) {
					t.Error("the stream's consumer left an event refused for good pending")
				}
				req := httptest.NewRequest(http.MethodPost, WebhookPath, strings.NewReader(string(e.Body())))
				req.Header.Set(webhook.HeaderID, e.ID)
				rec := httptest.NewRecorder()
				a.WebhookHandler().ServeHTTP(rec, req)
				if body, _ := io.ReadAll(rec.Body); rec.Code != http.StatusUnprocessableEntity || !strings.Contains(string(body), DocsPath+"/"+ProblemEventRejected) {
					t.Errorf("the webhook of an event refused for good: %d %s, want 422 event-rejected", rec.Code, body)
				}
			}
		})
	}
}
