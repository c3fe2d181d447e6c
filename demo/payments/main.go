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
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return // the usage was asked for, and printed
	case err != nil:
		log.Error("payments demo not started", "error", err.Error())
		os.Exit(2)
	}
	if err := run(cfg, log); err != nil {
		log.Error("payments demo stopped", "error", err.Error())
		os.Exit(1)
	}
}

func run(cfg app.Config, log *slog.Logger) error {
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
