package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemadmin"
	gormstore "github.com/idemkit/idemkit/stores/gorm"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/payments"
	"github.com/idemkit/idemkit/demo/payments/internal/server"
)

// serving is a demo run by App.Serve, as the command runs it: stop stands
// for SIGTERM, and served gives Serve's result.
type serving struct {
	demo
	admin string // the admin listener's base URL, if any
	// records is the records admin listener's base URL, if any.
	records string
	grpc    string // the gRPC listener's address, if any
	stop    context.CancelFunc
	served  chan error
}

func serve(t *testing.T, cfg app.Config) *serving {
	t.Helper()
	return serveLogged(t, cfg, quietLog())
}

// serveLogged is serve with the demo logging to log.
func serveLogged(t *testing.T, cfg app.Config, log *slog.Logger) *serving {
	t.Helper()
	a, err := app.Open(t.Context(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var adminLn net.Listener
	s := &serving{demo: demo{url: "http://" + apiLn.Addr().String(), app: a}, served: make(chan error, 1)}
	if cfg.AdminAddr != "" {
		if adminLn, err = net.Listen("tcp", cfg.AdminAddr); err != nil {
			t.Fatal(err)
		}
		s.admin = "http://" + adminLn.Addr().String()
	}
	var recordsLn net.Listener
	if cfg.RecordsAdminAddr != "" {
		if recordsLn, err = net.Listen("tcp", cfg.RecordsAdminAddr); err != nil {
			t.Fatal(err)
		}
		s.records = "http://" + recordsLn.Addr().String()
	}
	var grpcLn net.Listener
	if cfg.GRPCAddr != "" {
		if grpcLn, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
			t.Fatal(err)
		}
		s.grpc = grpcLn.Addr().String()
	}
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	go func() {
		s.served <- a.Serve(ctx, app.Listeners{API: apiLn, Admin: adminLn, RecordsAdmin: recordsLn, GRPC: grpcLn})
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-s.served:
		case <-time.After(time.Minute):
			t.Error("Serve did not return")
		}
		a.Close()
	})
	return s
}

// shutdown stops the demo as SIGTERM does and returns Serve's result.
func (s *serving) shutdown(t *testing.T, within time.Duration) error {
	t.Helper()
	s.stop()
	select {
	case err := <-s.served:
		s.served <- err // for the cleanup
		return err
	case <-time.After(within):
		t.Fatalf("the demo did not stop within %v of SIGTERM", within)
		return nil
	}
}

// waitForProviderCall waits until the provider got a charge of account.
func (s *serving) waitForProviderCall(t *testing.T, account string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); s.app.Provider.Counts(account).Calls == 0; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the charge never reached the provider")
		}
	}
}

// TestSIGTERMLetsARunningChargeFinish: a charge running when SIGTERM comes
// finishes (201, written, recorded) before the demo stops, however long
// within its lease it takes: the shutdown grace is derived from the lease.
func TestSIGTERMLetsARunningChargeFinish(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.DB = filepath.Join(t.TempDir(), "p.db")
	cfg.Lease, cfg.ProviderLatency = 3*time.Second, 2*time.Second
	s := serve(t, cfg)
	acct, key := newAccount(), newKey()
	answered := make(chan reply, 1)
	go func() {
		r, err := s.post(acct, key, chargeBody)
		if err != nil {
			r.status, r.body = -1, []byte(err.Error())
		}
		answered <- r
	}()
	s.waitForProviderCall(t, acct)
	if err := s.shutdown(t, cfg.ShutdownGrace()+5*time.Second); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	r := <-answered
	if r.status != 201 {
		t.Fatalf("the charge running at SIGTERM answered %d %s, want 201", r.status, r.body)
	}
	// Written and recorded before the database was closed.
	b, err := payments.GetBalance(context.Background(), s.app.DB, acct)
	if err != nil || b.Charges != 1 {
		t.Fatalf("balance after the shutdown %+v (%v), want the charge", b, err)
	}
}

// TestAChargeLongerThanItsLeaseEnds: a charge still running after a whole
// lease (here the payment provider hangs) is abandoned: 503 timed-out with
// Retry-After, nothing written, the key released for the retry. So a
// SIGTERM never waits longer than the grace for it.
func TestAChargeLongerThanItsLeaseEnds(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.DB = filepath.Join(t.TempDir(), "p.db")
	cfg.Lease, cfg.ProviderLatency = time.Second, time.Hour
	s := serve(t, cfg)
	acct, key := newAccount(), newKey()
	answered := make(chan reply, 1)
	go func() {
		r, err := s.post(acct, key, chargeBody)
		if err != nil {
			r.status, r.body = -1, []byte(err.Error())
		}
		answered <- r
	}()
	s.waitForProviderCall(t, acct)
	if err := s.shutdown(t, cfg.ShutdownGrace()+5*time.Second); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	r := <-answered
	r.problem(t, 503, "timed-out")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("503 timed-out without Retry-After")
	}
	b, err := payments.GetBalance(context.Background(), s.app.DB, acct)
	if err != nil || b.Charges != 0 {
		t.Fatalf("balance %+v (%v): the abandoned charge wrote a row", b, err)
	}
	var held int64
	if err := s.app.DB.Table(gormstore.DefaultTable).Count(&held).Error; err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Fatalf("%d idempotency records left: the abandoned charge kept its key", held)
	}
}

func TestShutdownGraceCoversALease(t *testing.T) {
	for _, lease := range []time.Duration{time.Second, 30 * time.Second, 10 * time.Minute} {
		cfg := app.DefaultConfig()
		cfg.Lease = lease
		if g := cfg.ShutdownGrace(); g <= lease {
			t.Errorf("lease %v: shutdown grace %v, want more than the lease a request may run", lease, g)
		}
	}
}

// TestAdminListener: with -admin-addr, the metrics and the provider's
// debug counts are served there, and no longer on the API's port; with
// -records-admin-addr, the records admin is served on a listener of its
// own, and on neither of the others.
func TestAdminListener(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.DB, cfg.AdminAddr, cfg.ProviderLatency = filepath.Join(t.TempDir(), "p.db"), "127.0.0.1:0", 0
	cfg.RecordsAdminAddr = "127.0.0.1:0"
	s := serve(t, cfg)
	acct, key := newAccount(), newKey()
	if r := s.do(t, http.MethodPost, "/v1/charges", acct, key, chargeBody); r.status != 201 {
		t.Fatalf("charge: %d %s", r.status, r.body)
	}
	admin := &demo{url: s.admin, app: s.app}
	// The records admin (idemctl's -admin) finds the charge's record by
	// its account and key, on its own listener only.
	records := idemadmin.NewClient(s.records+server.RecordsAdminPath, "", nil)
	id := idem.ID{Scope: api.AccountScope(acct), Key: strings.Trim(key, `"`)}
	if in, err := records.Inspect(t.Context(), id); err != nil || in.State != "completed" || in.Status != 201 {
		t.Fatalf("records admin get: %+v, %v", in, err)
	}
	if st, err := records.RecordStats(t.Context(), time.Time{}, 5); err != nil || st.Completed == 0 {
		t.Fatalf("records admin stats: %+v, %v", st, err)
	}
	for _, d := range []*demo{&s.demo, admin} {
		d.do(t, http.MethodGet, server.RecordsAdminPath+"/stats", acct, "", "").problem(t, 404, "not-found")
		d.do(t, http.MethodPost, server.RecordsAdminPath+"/forget", acct, "", `{"key":"x"}`).problem(t, 404, "not-found")
	}
	recordsDemo := &demo{url: s.records, app: s.app}
	for _, path := range []string{"/metrics", "/debug/provider", "/healthz", "/v1/balance"} {
		recordsDemo.do(t, http.MethodGet, path, acct, "", "").problem(t, 404, "not-found")
	}
	if r := admin.do(t, http.MethodGet, "/metrics", "", "", ""); r.status != 200 || !bytesContain(r.body, "idemkit_") {
		t.Fatalf("admin GET /metrics: %d %.300s", r.status, r.body)
	}
	if c := admin.provider(t, acct); c["authorizations"] != 1.0 {
		t.Fatalf("admin GET /debug/provider: %v", c)
	}
	if r := admin.do(t, http.MethodGet, "/healthz", "", "", ""); r.status != 200 {
		t.Fatalf("admin GET /healthz: %d", r.status)
	}
	admin.do(t, http.MethodPost, "/metrics", "", "", "").problem(t, 405, "method-not-allowed")
	admin.do(t, http.MethodGet, "/v1/balance", acct, "", "").problem(t, 404, "not-found")
	for _, path := range []string{"/metrics", "/debug/provider"} {
		s.do(t, http.MethodGet, path, acct, "", "").problem(t, 404, "not-found")
	}
	if r := s.do(t, http.MethodGet, "/healthz", "", "", ""); r.status != 200 {
		t.Fatalf("API GET /healthz: %d", r.status)
	}
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

func bytesContain(b []byte, s string) bool { return bytes.Contains(b, []byte(s)) }
