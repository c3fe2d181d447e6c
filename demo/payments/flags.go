package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/server"
)

// parseFlags reads the flags into a Config, with PAYMENTS_<FLAG>
// environment variables as defaults that the command line overrides. The
// usage goes to usage; -h asks for it and returns flag.ErrHelp, which is
// not a failure.
func parseFlags(args []string, usage io.Writer) (app.Config, error) {
	cfg := app.DefaultConfig()
	fs := newFlagSet(&cfg, usage)
	if err := setFromEnvironment(fs); err != nil {
		return cfg, err
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
	// idemkit's Engine refuses these (it panics): refused here first, as
	// any bad flag is, rather than as a crash at start.
	if err := app.CheckLease(cfg.Lease); err != nil {
		return cfg, err
	}
	if err := app.CheckTTL(cfg.TTL, cfg.Lease); err != nil {
		return cfg, err
	}
	if err := app.CheckRecords(cfg.Records); err != nil {
		return cfg, err
	}
	if cfg.SettleEvery < 0 {
		return cfg, errors.New("-settle-every must be 0 or more")
	}
	if err := app.CheckWebhookSecret(cfg.WebhookSecret); err != nil {
		return cfg, err
	}
	if err := app.CheckEvents(cfg.Events); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// setFromEnvironment sets every flag whose PAYMENTS_<FLAG> variable is
// set, before the command line is parsed.
func setFromEnvironment(fs *flag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := app.EnvName(f.Name)
		if v, ok := os.LookupEnv(name); ok && err == nil {
			if serr := f.Value.Set(v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, serr)
			}
		}
	})
	return err
}

// newFlagSet defines the command's flags on cfg, their defaults its
// values; the usage goes to usage.
func newFlagSet(cfg *app.Config, usage io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("payments", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.Usage = func() {
		fmt.Fprint(usage, `Usage: payments [flags]

The payments demo: an API whose charges never double-charge, however often
clients retry. Every flag can also be set with an environment variable
PAYMENTS_<FLAG> (upper case, dashes as underscores), e.g.
PAYMENTS_PROVIDER_LATENCY=10ms; the command line wins over the variable.

Flags:
`)
		fs.PrintDefaults()
	}

	fs.StringVar(&cfg.Addr, "addr", cfg.Addr, "listen address")
	fs.StringVar(&cfg.AdminAddr, "admin-addr", cfg.AdminAddr, "admin listen address for /metrics, /debug/provider and the records admin /idemadmin (idemctl -admin; default: /metrics and /debug/provider served on -addr, no records admin)")
	fs.StringVar(&cfg.GRPCAddr, "grpc-addr", cfg.GRPCAddr, "gRPC listen address for payments.v1.Charges/Create, on the same idempotency keys and database as the API (default: no gRPC listener)")
	fs.StringVar(&cfg.Framework, "framework", cfg.Framework, strings.Join(server.Frameworks, "|")+" (echo is Echo v4, fiber Fiber v2)")
	fs.StringVar(&cfg.DB, "db", cfg.DB, "SQLite file path, or a postgres:// or mysql:// DSN")
	fs.DurationVar(&cfg.TTL, "ttl", cfg.TTL, "how long idempotency keys are kept after completion (at least 5m, the webhooks' signature tolerance, and -lease, the event stream's claim delay; at most 100 years)")
	fs.DurationVar(&cfg.Lease, "lease", cfg.Lease, "in-flight lease of a running request (100ms to 100 years)")
	fs.DurationVar(&cfg.ProviderLatency, "provider-latency", cfg.ProviderLatency, "simulated payment-provider latency")
	fs.Float64Var(&cfg.ProviderFailureRate, "provider-failure-rate", cfg.ProviderFailureRate, "probability 0..1 of a transient provider failure")
	fs.BoolVar(&cfg.FaultInjection, "fault-injection", cfg.FaultInjection, "let requests ask for injected network faults with the header Demo-Network: flaky (attempts held 4 s, answers broken off), for the checkout page's flaky-network switch; off, the header is ignored")
	fs.StringVar(&cfg.Records, "records", cfg.Records, "where idempotency records are kept: empty for the -db database, committed with the charges; or a redis:// URL, with each charge carrying its key under a unique constraint")
	fs.DurationVar(&cfg.SettleEvery, "settle-every", cfg.SettleEvery, "how often the simulated provider sends the settlement events of the charges and refunds not yet settled (0: never)")
	fs.BoolVar(&cfg.Webhooks, "webhooks", cfg.Webhooks, "the provider sends its settlement events as signed webhooks to this demo's POST /v1/webhooks/provider")
	fs.StringVar(&cfg.WebhookSecret, "webhook-secret", cfg.WebhookSecret, "the Standard Webhooks secret, whsec_<base64 of 24 to 64 bytes>, that signs the provider's webhooks and checks those received (default: a random one at each start)")
	fs.StringVar(&cfg.Events, "events", cfg.Events, "a redis:// URL: the provider's events also go to a Redis stream there, which this demo consumes in a consumer group shared by every instance given the same URL")

	return fs
}
