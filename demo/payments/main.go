// Command payments is a demo payments API whose charges never
// double-charge, however often clients retry: every POST is guarded by
// idemkit, and a charge row commits in the same transaction as the stored
// response. It runs on Gin (default), Echo v4 or v5, Fiber v2 or v3, or
// net/http, and serves a checkout page at / that pays through the API from
// a browser; with -grpc-addr it also takes charges over gRPC. Its
// simulated payment provider settles every charge and refund with an event,
// sent as a signed webhook (and with -events, on a Redis stream that a
// fleet of demos consumes together), which changes the ledger once however
// often it comes.
//
//	go run ./demo/payments                          # SQLite file payments.db, Gin, 127.0.0.1:8080
//	go run ./demo/payments -framework fiber -db postgres://user@127.0.0.1:5432/payments
//	go run ./demo/payments -records redis://127.0.0.1:6379/0   # records in Redis, charges in payments.db
//	go run ./demo/payments -fault-injection         # the checkout page's flaky-network switch works
//	go run ./demo/payments -events redis://127.0.0.1:6379/0    # events on a Redis stream too, consumed in a group
//	go run ./demo/payments -grpc-addr 127.0.0.1:9090  # charges over gRPC too, payments.v1.Charges/Create
//
// Every flag can also be set with an environment variable PAYMENTS_<FLAG>
// (upper case, dashes as underscores), e.g. PAYMENTS_PROVIDER_LATENCY=10ms.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemkit/idemkit/core/idemadmin"
	"github.com/idemkit/idemkit/internal/redact"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/server"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	app.LogRedisTo(log)
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return // the usage was asked for, and printed
	case err != nil:
		log.Error("payments demo not started", "error", scrub(err, cfg, os.Args[1:]))
		os.Exit(2)
	}
	if err := run(cfg, log); err != nil {
		log.Error("payments demo stopped", "error", scrub(err, cfg, os.Args[1:]))
		os.Exit(1)
	}
}

// scrub is err's text without the passwords of the databases and Redis
// URLs cfg and args name, nor the records admin's token: a driver's error
// may quote a DSN whole, a URL that does not parse included.
func scrub(err error, cfg app.Config, args []string) string {
	var secrets []string
	for _, s := range append(args, cfg.DB, cfg.Records, cfg.Events, os.Getenv(app.EnvName("db")),
		os.Getenv(app.EnvName("records")), os.Getenv(app.EnvName("events"))) {
		secrets = append(secrets, redact.Secrets(s)...)
	}
	return redact.Scrub(err.Error(), append(secrets, cfg.RecordsAdminToken, cfg.WebhookSecret)...)
}

// closeAll closes the listeners of ls opened so far.
func closeAll(ls app.Listeners) {
	for _, ln := range []net.Listener{ls.API, ls.Admin, ls.RecordsAdmin, ls.GRPC} {
		if ln != nil {
			ln.Close()
		}
	}
}

// run serves until SIGINT or SIGTERM, then shuts down gracefully: the
// listeners close, and the requests running finish within the shutdown
// grace (Config.ShutdownGrace: one lease and the store calls around it)
// before the database is closed. A second signal stops the process at once.
func run(cfg app.Config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	a, err := app.Open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	apiLn, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	ls := app.Listeners{API: apiLn}
	attrs := []any{"addr", "http://" + apiLn.Addr().String(), "framework", cfg.Framework, "db", cfg.DBLabel(), "records", cfg.RecordsLabel(),
		"events", cfg.EventsLabel()}
	if cfg.AdminAddr != "" {
		if ls.Admin, err = net.Listen("tcp", cfg.AdminAddr); err != nil {
			closeAll(ls)
			return fmt.Errorf("admin listener: %w", err)
		}
		attrs = append(attrs, "admin", "http://"+ls.Admin.Addr().String())
	}
	if cfg.RecordsAdminAddr != "" {
		if ls.RecordsAdmin, err = net.Listen("tcp", cfg.RecordsAdminAddr); err != nil {
			closeAll(ls)
			return fmt.Errorf("records admin listener: %w", err)
		}
		attrs = append(attrs, "records_admin", "http://"+ls.RecordsAdmin.Addr().String()+server.RecordsAdminPath)
	}
	if cfg.GRPCAddr != "" {
		if ls.GRPC, err = net.Listen("tcp", cfg.GRPCAddr); err != nil {
			closeAll(ls)
			return fmt.Errorf("gRPC listener: %w", err)
		}
		attrs = append(attrs, "grpc", ls.GRPC.Addr().String())
	}
	log.Info("payments demo listening", attrs...)
	if ls.RecordsAdmin != nil && !idemadmin.Loopback(ls.RecordsAdmin.Addr().String()) {
		if cfg.RecordsAdminToken == "" {
			log.Warn("the records admin listens beyond loopback without a token: it refuses every peer but loopback ones; give it a token (-records-admin-token-file) to serve others",
				"records_admin", ls.RecordsAdmin.Addr().String())
		} else {
			log.Warn("the records admin listens beyond loopback: any peer with its token can make a charge run again",
				"records_admin", ls.RecordsAdmin.Addr().String())
		}
	}

	// From the first signal on, a second one ends the process.
	context.AfterFunc(ctx, stop)
	return a.Serve(ctx, ls)
}
