package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	gormstore "github.com/idemkit/idemkit/stores/gorm"

	"github.com/idemkit/idemkit/demo/payments/internal/payments"
)

// losingStore is the GORM store, except that while lose is set every
// renewal reports the lease taken over, as when another instance took
// the key after a stall.
type losingStore struct {
	*gormstore.Store
	lose atomic.Bool
}

func (s *losingStore) Renew(ctx context.Context, id idem.ID, token string, leaseUntil time.Time) error {
	if s.lose.Load() {
		return idem.ErrLockLost
	}
	return s.Store.Renew(ctx, id, token, leaseUntil)
}

// OneProcess is false: the store stands for one a fleet shares, whose
// leases the Engine renews (a SQLite store serves one process and takes
// none, which would leave no lease to lose).
func (*losingStore) OneProcess() bool { return false }

// RenewBatch keeps the renewals going through Renew, whatever the GORM
// store offers.
func (s *losingStore) RenewBatch(ctx context.Context, held []idem.Held, leaseUntil time.Time, lost []bool) error {
	for i, h := range held {
		switch err := s.Renew(ctx, h.ID, h.Token, leaseUntil); {
		case errors.Is(err, idem.ErrLockLost):
			lost[i] = true
		case err != nil:
			return err
		}
	}
	return nil
}

// stallingProvider is the simulated provider, answered only once the
// caller's context is done while stall is set: the lease is lost while
// the provider works. If answer is set the caller then still hears the
// provider's answer (it came back just as the lease went), otherwise only
// the context's error (the answer was lost).
type stallingProvider struct {
	*payments.Provider
	stall, answer atomic.Bool
}

func (p *stallingProvider) Authorize(ctx context.Context, a payments.Authorization) error {
	stall := p.stall.Load()
	err := p.Provider.Authorize(ctx, a)
	if !stall {
		return err
	}
	<-ctx.Done()
	if p.answer.Load() {
		return err
	}
	return ctx.Err()
}

// TestLeaseLostDuringTheProviderCall: a charge whose lease is lost while
// the provider works writes nothing, is not recorded, and its retry gets
// the provider's first authorization back instead of taking the money
// again: one charge, one authorization.
func TestLeaseLostDuringTheProviderCall(t *testing.T) {
	for _, answered := range []bool{true, false} {
		name := map[bool]string{true: "answer-received", false: "answer-lost"}[answered]
		t.Run(name, func(t *testing.T) {
			db := ledgerDB(t)
			gs, err := gormstore.New(db)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { gs.Close() })
			if err := gs.AutoMigrate(t.Context()); err != nil {
				t.Fatal(err)
			}
			store := &losingStore{Store: gs}
			engine := idem.New(idem.Config{Store: store, Lease: 300 * time.Millisecond, ProblemBase: DocsPath + "/",
				Logger: slog.New(slog.DiscardHandler)})
			provider := &stallingProvider{Provider: &payments.Provider{}}
			a := &API{DB: db, Provider: provider, Now: time.Now, Logger: slog.New(slog.DiscardHandler), ProblemBase: DocsPath + "/"}
			srv := httptest.NewServer(gormstore.TxMiddleware(idemhttp.Middleware(engine, idemhttp.WithScope(func(r *http.Request) string {
				acct, _ := Account(r.Header.Get("Authorization"))
				return acct
			}))(a.Handler())))
			t.Cleanup(srv.Close)

			const acct = "acct_lease"
			post := func() (int, string) {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges",
					strings.NewReader(`{"amount":1999,"currency":"usd","customer":"cus_1"}`))
				req.Header.Set("Authorization", "Bearer "+acct)
				req.Header.Set("Idempotency-Key", `"lease-1"`)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				return resp.StatusCode, string(body)
			}

			provider.stall.Store(true)
			provider.answer.Store(answered)
			store.lose.Store(true)
			status, body := post()
			if status != 503 || !strings.Contains(body, DocsPath+"/lease-lost") {
				t.Errorf("the attempt that lost its lease answered %d %s, want 503 lease-lost", status, body)
			}
			var rows int64
			if err := db.Model(&payments.Charge{}).Where("account = ?", acct).Count(&rows).Error; err != nil || rows != 0 {
				t.Errorf("%d charges written by the attempt that lost its lease (%v)", rows, err)
			}

			provider.stall.Store(false)
			store.lose.Store(false)
			status, body = post()
			for deadline := time.Now().Add(10 * time.Second); status == 409 && time.Now().Before(deadline); status, body = post() {
				time.Sleep(20 * time.Millisecond) // the released key may still be in its lease
			}
			if status != 201 {
				t.Fatalf("retry: %d %s", status, body)
			}
			b, err := payments.GetBalance(t.Context(), db, acct)
			if err != nil {
				t.Fatal(err)
			}
			if c := provider.Counts(acct); c.Authorizations != 1 || b.Charges != 1 {
				t.Fatalf("%d authorizations for %d charges, want 1 and 1", c.Authorizations, b.Charges)
			}
		})
	}
}
