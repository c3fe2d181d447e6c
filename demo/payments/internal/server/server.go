// Package server assembles the demo API on one of the six frameworks. Each
// framework gets the same chain, in this order: request log, panic
// recovery, then for /v1: authentication (a 401 records nothing), the
// transaction slot (so the handler's writes commit with the stored
// response), idemkit's middleware for that framework, and the API. The
// provider's webhooks (api.WebhookPath) take no bearer token: their chain
// checks the signature instead (a webhook refused records nothing), then
// the transaction slot and idemkit's middleware, its key taken from the
// webhook-id header (the adapter's WithKey).
package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/checkout"
	"github.com/idemkit/idemkit/demo/payments/internal/flaky"
	"github.com/idemkit/idemkit/demo/payments/internal/webhook"
)

// DebugPath serves what the simulated payment provider did for the
// caller's account (api.API.ProviderDebug).
const DebugPath = "/debug/provider"

// Frameworks lists the values of the -framework flag.
var Frameworks = []string{"gin", "echo", "echov5", "fiber", "fiberv3", "nethttp"}

// Config is what every framework's server is built from.
type Config struct {
	Framework string
	Engine    *idem.Engine
	API       *api.API
	// Metrics serves GET /metrics; Docs serves GET /docs/idempotency and
	// the problem type pages under it.
	Metrics http.Handler
	Docs    http.Handler
	// Debug serves GET /debug/provider, outside the /v1 API: it checks the
	// bearer token itself.
	Debug http.Handler
	// SeparateAdmin leaves GET /metrics and GET /debug/provider to the
	// admin server (NewAdmin): the API server answers 404 for them.
	SeparateAdmin bool
	// RecordsAdmin is idemkit's records admin (idemadmin.Handler), served
	// under RecordsAdminPath by the records admin server alone
	// (NewRecordsAdmin): never on the API's listener, nor on the admin
	// listener that Prometheus scrapes, since it can make a charge run
	// again.
	RecordsAdmin http.Handler
	// Checkout serves the checkout page's files, GET at checkout.Paths.
	Checkout http.Handler
	// Network is the "flaky network" fault mode the checkout page asks
	// for: outermost, and around the API where the key is held. Nil when
	// the operator has not turned fault injection on: no request is
	// faulted then, whatever it asks.
	Network *flaky.Network
	Logger  *slog.Logger
}

// Server is a running framework server.
type Server interface {
	Serve(ln net.Listener) error
	Shutdown(ctx context.Context) error
}

// New builds the server for cfg.Framework.
func New(cfg Config) (Server, error) {
	var h http.Handler
	switch cfg.Framework {
	case "nethttp":
		h = newNetHTTP(cfg)
	case "gin":
		h = newGin(cfg)
	case "echo":
		h = newEcho(cfg)
	case "echov5":
		h = newEchoV5(cfg)
	case "fiber":
		return newFiber(cfg), nil
	case "fiberv3":
		return newFiberV3(cfg), nil
	default:
		return nil, fmt.Errorf("unknown framework %q (want one of %v)", cfg.Framework, Frameworks)
	}
	return newHTTPServer(cfg.Network.Middleware(logRequests(cfg.Logger, cfg.Framework, guard(cfg.API, apiRoutes(cfg), api.StripeEdge(h))))), nil
}

// apiHandler is the /v1 API as every framework mounts it, behind its
// idemkit middleware: a request the flaky network holds waits there, with
// its key held.
func apiHandler(cfg Config) http.Handler {
	return cfg.Network.HoldHandler(cfg.API.Handler())
}

// page is a GET route the API listener serves beside the API.
type page struct {
	path    string
	handler http.Handler
}

// pages are the GET routes every router but net/http's mounts beside the
// API, each answering HEAD too (getOnly), with their parameters written
// as those routers take them (":name").
func pages(cfg Config) []page {
	ps := []page{{"/healthz", http.HandlerFunc(healthz)}}
	for _, path := range checkout.Paths {
		ps = append(ps, page{path, cfg.Checkout})
	}
	if !cfg.SeparateAdmin {
		ps = append(ps, page{"/metrics", cfg.Metrics}, page{DebugPath, cfg.Debug})
	}
	return append(ps, page{api.DocsPath, cfg.Docs}, page{api.DocsPath + "/:name", cfg.Docs})
}

// RecordsAdminPath is where the records admin server serves
// Config.RecordsAdmin: idemctl's -admin URL is
// http://RECORDS-ADMIN-ADDR/idemadmin.
const RecordsAdminPath = "/idemadmin"

// NewAdmin builds the admin server, for a Config with SeparateAdmin: GET
// /metrics, GET /debug/provider and GET /healthz, on net/http whatever the
// API's framework. It serves nothing that changes a record: Prometheus may
// scrape it from another host.
func NewAdmin(cfg Config) Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /metrics", cfg.Metrics)
	mux.Handle("GET "+DebugPath, cfg.Debug)
	rs := append(routes{{"/healthz", getOnly}}, adminRoutes()...)
	return newHTTPServer(logRequests(cfg.Logger, "admin", guard(cfg.API, rs, recoverPanics(cfg.API, mux))))
}

// NewRecordsAdmin builds the records admin server: Config.RecordsAdmin
// under RecordsAdminPath, and nothing else, on a listener of its own.
func NewRecordsAdmin(cfg Config) Server {
	mux := http.NewServeMux()
	mux.Handle(RecordsAdminPath+"/", cfg.RecordsAdmin)
	rs := routes{{RecordsAdminPath + "/get", postOnly}, {RecordsAdminPath + "/forget", postOnly},
		{RecordsAdminPath + "/stats", getOnly}, {RecordsAdminPath + "/purge", postOnly}}
	return newHTTPServer(logRequests(cfg.Logger, "records-admin", guard(cfg.API, rs, recoverPanics(cfg.API, mux))))
}

// webhookID is where the webhook route takes its idempotency key from:
// the webhook-id header, one id per event, the same on every delivery.
func webhookID(header func(string) string) (string, bool) {
	id := header(webhook.HeaderID)
	return id, id != ""
}

// webhookScope is the scope of the webhooks' records.
func webhookScope() string { return api.WebhookScope }

// scope is the tenant of a request: its account's scope, which no scope
// of the provider's webhooks and events can be (api.AccountScope).
func scope(authorization string) string {
	acct, _ := api.Account(authorization)
	return api.AccountScope(acct)
}

// frameworkError is the problem for an error a framework reports itself
// (no route, wrong method, a recovered panic).
func frameworkError(a *api.API, status int) exchange.Response {
	switch status {
	case http.StatusNotFound:
		return a.Problem(status, api.ProblemNotFound, "Not found", "No such endpoint.")
	case http.StatusMethodNotAllowed:
		return a.Problem(status, api.ProblemMethodNotAllowed, "Method not allowed", "This endpoint does not accept that method.")
	}
	if status < 500 {
		return a.Problem(status, api.ProblemInvalidRequest, http.StatusText(status), "The request was rejected.")
	}
	return a.Problem(status, api.ProblemInternalError, "Internal error", "The request failed. No charge was made; retry with the same Idempotency-Key.")
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"status":"ok"}`))
}

type httpServer struct{ srv *http.Server }

func newHTTPServer(h http.Handler) *httpServer {
	return &httpServer{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
}

func (s *httpServer) Serve(ln net.Listener) error {
	if err := s.srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}

func (s *httpServer) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// statusWriter remembers the status for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logRequests writes one structured line per request (logLine).
func logRequests(log *slog.Logger, framework string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		logLine(log, framework, r.Method, r.URL.Path, sw.status, w.Header().Get(exchange.ReplayedHeader) == "true", time.Since(start))
	})
}

// logLine logs one request at INFO, or at DEBUG for the operators'
// endpoints that machines poll: a Prometheus scrape of /metrics and a
// probe of /healthz come every few seconds, and would bury the requests
// worth reading.
func logLine(log *slog.Logger, framework, method, path string, status int, replayed bool, d time.Duration) {
	level := slog.LevelInfo
	if path == "/metrics" || path == "/healthz" {
		level = slog.LevelDebug
	}
	log.LogAttrs(context.Background(), level, "request",
		slog.String("framework", framework), slog.String("method", method), slog.String("path", path),
		slog.Int("status", status), slog.Bool("replayed", replayed), slog.Duration("duration", d))
}
