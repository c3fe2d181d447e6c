// Package app wires the demo together from its configuration: database,
// idempotency store and engine, metrics, API and framework server. The
// command, its tests and the storm all start the demo through Open.
package app

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemadmin"
	"github.com/idemkit/idemkit/internal/redact"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	"github.com/idemkit/idemkit/stores/gorm/opendb"
	redisstore "github.com/idemkit/idemkit/stores/redis"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/checkout"
	"github.com/idemkit/idemkit/demo/payments/internal/docs"
	"github.com/idemkit/idemkit/demo/payments/internal/flaky"
	"github.com/idemkit/idemkit/demo/payments/internal/payments"
	"github.com/idemkit/idemkit/demo/payments/internal/server"
	"github.com/idemkit/idemkit/demo/payments/internal/stream"
	"github.com/idemkit/idemkit/demo/payments/internal/webhook"
)

// Config holds the demo's settings; each has a flag of the same name.
type Config struct {
	Addr string
	// AdminAddr, if set, is the admin listener's address: GET /metrics and
	// GET /debug/provider are served there, and no longer on Addr.
	AdminAddr string
	// RecordsAdminAddr, if set, is the records admin's listener: idemkit's
	// idemadmin.Handler (idemctl's -admin), under server.RecordsAdminPath,
	// alone. It can make a charge run again, so it is never on Addr nor on
	// AdminAddr, and it serves loopback peers only unless
	// RecordsAdminToken is set (no flag: the command reads it from a file
	// or the environment, never from its command line).
	RecordsAdminAddr  string
	RecordsAdminToken string
	// GRPCAddr, if set, is the gRPC listener's address: it serves
	// payments.v1.Charges/Create (api.ChargesCreate) on the same Engine
	// and database as the HTTP API.
	GRPCAddr            string
	Framework           string
	DB                  string
	TTL                 time.Duration
	Lease               time.Duration
	ProviderLatency     time.Duration
	ProviderFailureRate float64
	// Records is where the idempotency records are kept: empty for the
	// database DB, in the charges' transactions; or a redis:// (rediss://)
	// URL, with each charge and refund row carrying its request's key under
	// a unique index instead (api.API.KeyedRows).
	Records string
	// FaultInjection lets a request ask for the checkout page's flaky
	// network (the header Demo-Network: flaky, package flaky): its attempts
	// held 4 s and their answers broken off. Off, the header is ignored,
	// and the page says the switch is off; it is a demonstration, not
	// something any client of a running demo should be able to set off.
	FaultInjection bool
	// Now is the clock of the idempotency Engine and of the API, which
	// tells by it whether a row's key has expired (nil: time.Now). Tests
	// move it instead of waiting for a TTL; it has no flag.
	Now func() time.Time

	// The payment provider's settlement events (see StartEvents).
	//
	// SettleEvery is how often the simulated provider sends the events of
	// the charges and refunds not yet settled; 0 sends none.
	SettleEvery time.Duration
	// WebhookSecret signs the provider's webhooks and checks those the
	// demo receives, in the Standard Webhooks form "whsec_<base64>"
	// (CheckWebhookSecret); empty, a random secret is made at each start.
	WebhookSecret string
	// Webhooks has the provider send its events as webhooks, to this
	// demo's api.WebhookPath, or to WebhookURL if set (no flag: the storm
	// puts its fault-injecting proxy there).
	Webhooks   bool
	WebhookURL string
	// WebhookDuplicateRate is the share of webhook deliveries the provider
	// sends twice at once, WebhookTimeout how long it waits for the answer
	// to one (0: 5 s), WebhookWorkers how many it makes at once (0: 8),
	// and RedeliverAfter how long it waits for an event it sent to be
	// applied before it sends it again (0: payments.DefaultRedeliverAfter).
	// None has a flag.
	WebhookDuplicateRate float64
	WebhookTimeout       time.Duration
	WebhookWorkers       int
	RedeliverAfter       time.Duration
	// Events, if set, is the redis:// URL of the Redis stream the
	// provider's events also go to, which the demo consumes in a consumer
	// group shared by every instance given the same URL. EventStream is
	// the stream's key there (no flag; empty: the constant EventStream):
	// tests sharing one Redis keep apart with keys of their own.
	Events      string
	EventStream string
}

// ShutdownGrace is how long a shutdown waits for the requests running
// when it began: one lease, the most a charge or refund may run (the
// Engine's HandlerTimeout), plus the store calls around it, taking the key
// and recording the response, each bounded by storeTimeout. So every
// request running at SIGTERM ends, finished or timed out with its key
// released, before the server stops waiting and closes the database.
func (c Config) ShutdownGrace() time.Duration {
	return c.Lease + 2*storeTimeout
}

// storeTimeout is the Engine's StoreTimeout: the deadline of each call to
// the idempotency store.
const storeTimeout = 5 * time.Second

// DefaultConfig returns the flags' defaults.
func DefaultConfig() Config {
	return Config{
		Addr:            "127.0.0.1:8080",
		Framework:       "gin",
		DB:              "payments.db",
		TTL:             24 * time.Hour,
		Lease:           30 * time.Second,
		ProviderLatency: 50 * time.Millisecond,

		SettleEvery:          time.Second,
		Webhooks:             true,
		WebhookDuplicateRate: 0.1,
	}
}

// EnvName is the environment variable that sets a flag: PAYMENTS_ and the
// flag's name in upper case with dashes as underscores.
func EnvName(flag string) string {
	return "PAYMENTS_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// DBLabel names the database for logs, without any password.
func (c Config) DBLabel() string { return opendb.Label(c.DB) }

// RecordsLabel names where the records are kept, for logs, without any
// password.
func (c Config) RecordsLabel() string {
	if c.Records == "" {
		return "db"
	}
	return redisLabel(c.Records)
}

// EventsLabel names the event stream's Redis, for logs, without any
// password; "none" without one.
func (c Config) EventsLabel() string {
	if c.Events == "" {
		return "none"
	}
	return redisLabel(c.Events)
}

// redisLabel is a redis:// URL without its password.
func redisLabel(rawURL string) string { return redact.DSN(rawURL) }

// CheckRecords reports why records, the value of Config.Records, names no
// place the demo can keep idempotency records, or nil.
func CheckRecords(records string) error {
	if records == "" {
		return nil
	}
	return checkRedisURL("-records must be empty (the -db database) or", records)
}

// checkRedisURL reports, after what, why u is no redis:// or rediss://
// URL, or nil.
func checkRedisURL(what, u string) error {
	if _, err := redis.ParseURL(u); err != nil {
		return fmt.Errorf("%s a redis:// or rediss:// URL, not %s: %w", what, redact.DSN(u), withoutURL(err))
	}
	return nil
}

// withoutURL is err without the URL a *url.Error quotes whole, password
// included.
func withoutURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// CheckTTL reports why ttl cannot be how long the demo keeps a key after
// its request completed (Config.TTL, the flag -ttl) beside lease (-lease),
// or nil. It must be at most idem.MaxDuration, beyond which idemkit's
// stores cannot keep the time; and at least webhook.Tolerance, the
// webhooks' signature tolerance, and lease, the event stream's claim delay
// (stream.Stream.ClaimAfter), so that a webhook replayed within its
// tolerance, and a stream entry claimed again after a consumer died, still
// find their event's record. (The ledger settles each charge and refund
// once however late an event comes; the record spares the work and
// replays the first answer.)
func CheckTTL(ttl, lease time.Duration) error {
	least := max(webhook.Tolerance, lease)
	if ttl < least || ttl > idem.MaxDuration {
		return fmt.Errorf("-ttl must be at least %v, the webhook signature tolerance (%v) and the event stream's claim delay (-lease %v), whichever is longer, and at most %v (100 years), not %v",
			least, webhook.Tolerance, lease, idem.MaxDuration, ttl)
	}
	return nil
}

// CheckLease reports why lease cannot be the in-flight lease of a running
// request (Config.Lease, the flag -lease), or nil: it must be from
// idem.MinLease, the shortest the Engine can keep renewing in time, to
// idem.MaxDuration.
func CheckLease(lease time.Duration) error {
	if lease < idem.MinLease || lease > idem.MaxDuration {
		return fmt.Errorf("-lease must be from %v to %v (100 years), not %v", idem.MinLease, idem.MaxDuration, lease)
	}
	return nil
}

// App is a started demo: its servers are built but not yet serving.
type App struct {
	Server server.Server
	// Admin serves GET /metrics and GET /debug/provider when the Config has
	// an AdminAddr; nil otherwise, and Server serves them.
	Admin server.Server
	// RecordsAdmin serves the records admin when the Config has a
	// RecordsAdminAddr; nil otherwise, and none is served.
	RecordsAdmin server.Server
	// GRPC serves api.ChargesCreate when the Config has a GRPCAddr; nil
	// otherwise.
	GRPC   server.Server
	Engine *idem.Engine
	DB     *gorm.DB
	// Store is the GORM store keeping the records in DB; nil when the
	// Config's Records names a Redis.
	Store *gormstore.Store
	// API serves /v1.
	API *api.API
	// Provider is the simulated payment provider the API charges through.
	Provider *payments.Provider
	// Stream is the event stream of the Config's Events; nil without.
	Stream *stream.Stream
	// Webhooks delivers the provider's webhooks once StartEvents has
	// started it; nil before, and without the Config's Webhooks.
	Webhooks *webhook.Sender
	metrics  *metrics
	// closeRecords stops the store (the GORM store's purger, or the Redis
	// client) and closes the event stream's Redis client.
	closeRecords func() error
	cfg          Config
	grace        time.Duration
	log          *slog.Logger
}

// Open connects to the database, migrates it and builds the server. A TTL
// or Lease out of range (CheckLease, CheckTTL; a TTL of 0 is idemkit's
// default, 24 hours) is an error, before anything is opened.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*App, error) {
	if err := CheckLease(cfg.Lease); err != nil {
		return nil, err
	}
	if cfg.TTL != 0 {
		if err := CheckTTL(cfg.TTL, cfg.Lease); err != nil {
			return nil, err
		}
	}
	db, err := openDB(cfg.DB)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	a, err := build(ctx, cfg, log, db)
	if err != nil {
		closeDB(db)
		return nil, err
	}
	return a, nil
}

// build migrates db and assembles the App on it.
func build(ctx context.Context, cfg Config, log *slog.Logger, db *gorm.DB) (*App, error) {
	secret := webhook.NewSecret()
	if cfg.WebhookSecret != "" {
		var err error
		if secret, err = webhook.ParseSecret(cfg.WebhookSecret); err != nil {
			return nil, fmt.Errorf("-webhook-secret: %w", err)
		}
	}
	if err := payments.Migrate(ctx, db); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	rec, err := openRecords(ctx, cfg.Records, db)
	if err != nil {
		return nil, err
	}
	events, err := openEvents(cfg)
	if err != nil {
		rec.close()
		return nil, err
	}
	closeRecords := rec.close
	if events != nil {
		closeRecords = func() error { return errors.Join(rec.close(), events.Client.Close()) }
	}
	m, err := newMetrics()
	if err != nil {
		closeRecords()
		return nil, err
	}
	problemBase := api.DocsPath + "/"
	// Left nil for the Engine, whose default system clock serves each
	// record's time and its latency with one reading.
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	// One secret keys the key hashes of the Engine's log lines and of the
	// records admin's audit lines, so that they correlate.
	keyHashSecret := make([]byte, 32)
	rand.Read(keyHashSecret)
	engine := idem.New(idem.Config{
		KeyHashSecret: keyHashSecret,
		Store:         rec.store,
		TTL:           cfg.TTL,
		Lease:         cfg.Lease,
		StoreTimeout:  storeTimeout,
		Clock:         engineClock(cfg.Now),
		// A charge or refund that has run a whole lease is stuck (a
		// provider that does not answer): it is abandoned, so that it never
		// outlasts the shutdown grace.
		HandlerTimeout: cfg.Lease,
		ProblemBase:    problemBase,
		Logger:         log,
		OnEvent:        m.onEvent,
	})
	provider := &payments.Provider{Latency: cfg.ProviderLatency, FailureRate: cfg.ProviderFailureRate, RedeliverAfter: cfg.RedeliverAfter}
	var network *flaky.Network // nil: no fault injected
	if cfg.FaultInjection {
		network = flaky.New(log)
	}
	// The API tells the rows whose key expired by the Engine's TTL, its
	// default included.
	cfg.TTL = engine.Config().TTL
	a := &api.API{
		DB:          db,
		Provider:    provider,
		Now:         now,
		TTL:         cfg.TTL,
		Logger:      log,
		ProblemBase: problemBase,
		KeyedRows:   rec.gorm == nil,

		Engine:        engine,
		WebhookSecret: secret,
	}
	if events != nil {
		events.ClaimAfter, events.Log = cfg.Lease, log
	}
	scfg := server.Config{
		Framework:     cfg.Framework,
		Engine:        engine,
		API:           a,
		Metrics:       m.handler,
		Docs:          docs.Handler(docs.Policy{TTL: cfg.TTL, Lease: cfg.Lease, Path: api.DocsPath, NotFound: http.HandlerFunc(a.NotFound)}),
		Debug:         a.ProviderDebug(provider),
		SeparateAdmin: cfg.AdminAddr != "",
		RecordsAdmin: idemadmin.Handler(rec.admin, idemadmin.HandlerOptions{Now: now, Token: cfg.RecordsAdminToken,
			Logger: log, Secret: keyHashSecret}),
		Checkout: checkout.Handler(http.HandlerFunc(a.NotFound), cfg.FaultInjection),
		Network:  network,
		Logger:   log,
	}
	srv, err := server.New(scfg)
	if err != nil {
		closeRecords()
		m.prom.Shutdown(ctx)
		return nil, err
	}
	app := &App{cfg: cfg, Server: srv, Engine: engine, DB: db, Store: rec.gorm, API: a, Provider: provider, Stream: events,
		metrics: m, closeRecords: closeRecords, grace: cfg.ShutdownGrace(), log: log}
	if scfg.SeparateAdmin {
		app.Admin = server.NewAdmin(scfg)
	}
	if cfg.RecordsAdminAddr != "" {
		app.RecordsAdmin = server.NewRecordsAdmin(scfg)
	}
	if cfg.GRPCAddr != "" {
		app.GRPC = server.NewGRPC(scfg)
	}
	return app, nil
}

// Listeners are the listeners App.Serve serves on.
type Listeners struct {
	// API is the HTTP API's.
	API net.Listener
	// Admin is the admin server's, for an App with one (the Config's
	// AdminAddr), RecordsAdmin the records admin's (RecordsAdminAddr), and
	// GRPC the gRPC server's (GRPCAddr); nil otherwise.
	Admin, RecordsAdmin, GRPC net.Listener
}

// Serve serves the API on ls.API, and the admin endpoints and the gRPC
// API on theirs if the App has those servers, until ctx ends or a server
// fails, with the provider's settlement events running (StartEvents; its
// webhooks go to ls.API unless the Config's WebhookURL says otherwise).
// Then it stops the events and shuts every server down at once: they stop
// accepting connections and wait for the running requests and calls, for
// at most the Config's ShutdownGrace, after which the gRPC server ends the
// calls still running. It returns nil after a clean shutdown. Close the
// App afterwards.
func (a *App) Serve(ctx context.Context, ls Listeners) error {
	type served struct {
		name string
		err  error
	}
	done := make(chan served, 4)
	webhooks := a.cfg.WebhookURL
	if webhooks == "" {
		webhooks = "http://" + ls.API.Addr().String() + api.WebhookPath
	}
	stopEvents := a.StartEvents(webhooks)
	type listening struct {
		name string
		srv  server.Server
		ln   net.Listener
	}
	running := []listening{{"API", a.Server, ls.API}}
	if a.Admin != nil {
		running = append(running, listening{"admin", a.Admin, ls.Admin})
	}
	if a.RecordsAdmin != nil {
		running = append(running, listening{"records admin", a.RecordsAdmin, ls.RecordsAdmin})
	}
	if a.GRPC != nil {
		running = append(running, listening{"gRPC", a.GRPC, ls.GRPC})
	}
	for _, s := range running {
		go func() { done <- served{s.name, s.srv.Serve(s.ln)} }()
	}
	var errs []error
	waiting := len(running)
	select {
	case s := <-done:
		waiting--
		if s.err != nil {
			errs = append(errs, fmt.Errorf("%s server: %w", s.name, s.err))
		}
	case <-ctx.Done():
		a.log.Info("shutting down", "grace", a.grace)
	}
	stopEvents()
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.grace)
	defer cancel()
	// All at once, so that each has the whole grace and none takes new
	// requests while another drains.
	shutdownErrs := make([]error, len(running))
	var wg sync.WaitGroup
	for i, s := range running {
		wg.Go(func() {
			if err := s.srv.Shutdown(shutdownCtx); err != nil {
				shutdownErrs[i] = fmt.Errorf("%s server: shutdown after %v: %w", s.name, a.grace, err)
			}
		})
	}
	wg.Wait()
	errs = append(errs, shutdownErrs...)
	for ; waiting > 0; waiting-- {
		if s := <-done; s.err != nil {
			errs = append(errs, fmt.Errorf("%s server: %w", s.name, s.err))
		}
	}
	return errors.Join(errs...)
}

// Close stops the store (the GORM store's purger, or the Redis client)
// and the metrics, and closes the database.
func (a *App) Close() error {
	err := a.closeRecords()
	a.metrics.prom.Shutdown(context.Background())
	return errors.Join(err, closeDB(a.DB))
}

// recordStore is the idempotency store the Config's Records names.
type recordStore struct {
	store idem.Store
	admin idemadmin.Store  // the same store, for the admin listener's records admin
	gorm  *gormstore.Store // the store when it is the GORM one, else nil
	close func() error
}

// openRecords opens the store for the records: the GORM store on db, its
// table migrated, or a Redis store for a redis:// URL. It does not contact
// Redis: a Redis that is down makes guarded requests answer 503 until it
// is back.
func openRecords(ctx context.Context, records string, db *gorm.DB) (recordStore, error) {
	if records == "" {
		store, err := gormstore.New(db)
		if err != nil {
			return recordStore{}, err
		}
		if err := store.AutoMigrate(ctx); err != nil {
			store.Close()
			return recordStore{}, fmt.Errorf("migrate idempotency table: %w", err)
		}
		return recordStore{store: store, admin: store, gorm: store, close: func() error { store.Close(); return nil }}, nil
	}
	opt, err := redis.ParseURL(records)
	if err != nil {
		return recordStore{}, fmt.Errorf("-records %s: %w", redact.DSN(records), withoutURL(err))
	}
	// Store calls keep the Engine's deadlines; and a Redis that is down is
	// reported after one dial, not five, so requests get their 503 fast.
	opt.ContextTimeoutEnabled = true
	opt.DialerRetries = 1
	client := redis.NewClient(opt)
	store, err := redisstore.New(client, redisstore.WithPrefix(RedisPrefix))
	if err != nil {
		client.Close()
		return recordStore{}, err
	}
	return recordStore{store: store, admin: store, close: client.Close}, nil
}

// RedisPrefix begins the name of every key the demo writes in Redis.
const RedisPrefix = "payments:idem:"

func closeDB(db *gorm.DB) error {
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// openDB opens a SQLite file, or PostgreSQL or MySQL for a postgres:// or
// mysql:// DSN, as idemctl's -store does (package opendb).
func openDB(dsn string) (*gorm.DB, error) {
	quiet := &gorm.Config{Logger: logger.Discard}
	kind, err := opendb.KindOf(dsn)
	if err != nil {
		return nil, err
	}
	if kind == opendb.SQLite {
		return opendb.Open(dsn, quiet)
	}
	return serverPool(opendb.Open(dsn, quiet))
}

// ServerConns is the size of the demo's pool on a database server. The
// standard library keeps 2 idle connections by default, so a busy server
// would dial and drop a connection for most requests; an unbounded pool
// would exhaust the server's connection slots under overload. Several
// instances sharing one server each take this many.
const ServerConns = 25

// serverPool sizes the pool of a database server connection.
func serverPool(db *gorm.DB, err error) (*gorm.DB, error) {
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(ServerConns)
	sqlDB.SetMaxIdleConns(ServerConns)
	return db, nil
}

// engineClock is the Engine's clock for the configuration's Now: the
// system clock when it is nil, else its readings with the system's timers.
func engineClock(now func() time.Time) idem.Clock {
	if now == nil {
		return nil
	}
	return readClock(now)
}

type readClock func() time.Time

func (c readClock) Now() time.Time                               { return c() }
func (readClock) AfterFunc(d time.Duration, f func()) idem.Timer { return time.AfterFunc(d, f) }
