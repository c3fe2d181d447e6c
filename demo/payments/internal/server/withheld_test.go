package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
	gormstore "github.com/idemkit/idemkit/stores/gorm"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/payments"
	"github.com/idemkit/idemkit/demo/payments/internal/testdb"
)

// TestStripeAnswerWithheld: a charge whose outcome idemkit must withhold
// (its work was rolled back with its failed completion, or another run
// holds its key) never reaches the client as a success, on any framework,
// sent as JSON or as Stripe's SDKs send it, although the Stripe edge holds
// the answer to render it: the client sees a broken connection or a
// retryable error, and retries with its key. (Gin's recovery swallows the
// panic that withholds through a writer that cannot reach the connection.)
func TestStripeAnswerWithheld(t *testing.T) {
	for _, fw := range Frameworks {
		for _, c := range []struct {
			name        string
			cause       error
			contentType string
			body        string
		}{
			{"stripe/rolled-back", idem.ErrRolledBack, "application/x-www-form-urlencoded", "amount=1999&currency=usd&source=tok_visa"},
			{"stripe/lock-lost", idem.ErrLockLost, "application/x-www-form-urlencoded", "amount=1999&currency=usd&source=tok_visa"},
			{"json/rolled-back", idem.ErrRolledBack, "application/json", `{"amount":1999,"currency":"usd","customer":"cus_1"}`},
			{"json/lock-lost", idem.ErrLockLost, "application/json", `{"amount":1999,"currency":"usd","customer":"cus_1"}`},
		} {
			t.Run(fw+"/"+c.name, func(t *testing.T) {
				db := testdb.Ledger(t)
				quiet := slog.New(slog.DiscardHandler)
				gs, err := gormstore.New(db)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { gs.Close() })
				if err := gs.AutoMigrate(t.Context()); err != nil {
					t.Fatal(err)
				}
				engine := idem.New(idem.Config{Store: idemtest.CompletionsFail(gs, c.cause), ProblemBase: api.DocsPath + "/", Logger: quiet})
				a := &api.API{DB: db, Provider: &payments.Provider{}, Now: time.Now, TTL: time.Hour, Logger: quiet,
					ProblemBase: api.DocsPath + "/", Engine: engine}
				none := http.NotFoundHandler()
				srv, err := New(Config{Framework: fw, Engine: engine, API: a, Logger: quiet,
					Metrics: none, Docs: none, Debug: none, RecordsAdmin: none, Checkout: none})
				if err != nil {
					t.Fatal(err)
				}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				go srv.Serve(ln)
				t.Cleanup(func() { srv.Shutdown(context.Background()) })

				req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/charges",
					strings.NewReader(c.body))
				req.Header.Set("Content-Type", c.contentType)
				req.Header.Set("Authorization", "Bearer sk_test_withheld")
				req.Header.Set("Idempotency-Key", "3f1c2d4e-5b6a-4c7d-8e9f-0a1b2c3d4e5f")
				resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
				if err != nil {
					return // a broken connection: the SDK retries with its key
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body)
				if errors.Is(err, io.ErrUnexpectedEOF) {
					return
				}
				if resp.StatusCode < 500 {
					t.Fatalf("a withheld charge answered %d %s, want a broken connection or a retryable error", resp.StatusCode, body)
				}
			})
		}
	}
}
