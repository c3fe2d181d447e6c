// Command payments is a demo payments API whose charges never
// double-charge, however often clients retry: every POST is guarded by
// idemkit, and a charge row commits in the same transaction as the stored
// response. It runs on Gin (default), Echo, Fiber or net/http.
//
//	go run ./demo/payments                          # SQLite file payments.db, Gin, 127.0.0.1:8080
//	go run ./demo/payments -framework fiber -db postgres://user@127.0.0.1:5432/payments
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
	"time"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(os.Args[1:], log); err != nil {
		log.Error("payments demo stopped", "error", err.Error())
		os.Exit(1)
	}
}

func run(args []string, log *slog.Logger) error {
	cfg, err := parseFlags(args)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	a, err := app.Open(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer a.Close()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	log.Info("payments demo listening", "addr", "http://"+ln.Addr().String(), "framework", cfg.Framework, "db", cfg.DBLabel())

	served := make(chan error, 1)
	go func() { served <- a.Server.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := a.Server.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return <-served
}

// parseFlags reads the flags, with PAYMENTS_<FLAG> environment variables as
// defaults that the command line overrides.
func parseFlags(args []string) (app.Config, error) {
	cfg := app.DefaultConfig()
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "listen address")
	fs.StringVar(&cfg.Framework, "framework", cfg.Framework, "gin|echo|fiber|nethttp")
	fs.StringVar(&cfg.DB, "db", cfg.DB, "SQLite file path, or a postgres:// or mysql:// DSN")
	fs.DurationVar(&cfg.TTL, "ttl", cfg.TTL, "how long idempotency keys are kept after completion")
	fs.DurationVar(&cfg.Lease, "lease", cfg.Lease, "in-flight lease of a running request")
	fs.DurationVar(&cfg.ProviderLatency, "provider-latency", cfg.ProviderLatency, "simulated payment-provider latency")
	fs.Float64Var(&cfg.ProviderFailureRate, "provider-failure-rate", cfg.ProviderFailureRate, "probability 0..1 of a transient provider failure")
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := os.LookupEnv(app.EnvName(f.Name)); ok && envErr == nil {
			if err := f.Value.Set(v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", app.EnvName(f.Name), v, err)
			}
		}
	})
	if envErr != nil {
		return cfg, envErr
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.ProviderFailureRate < 0 || cfg.ProviderFailureRate > 1 {
		return cfg, errors.New("-provider-failure-rate must be between 0 and 1")
	}
	return cfg, nil
}
