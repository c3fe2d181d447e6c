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
	var tokenFile string
	fs := newFlagSet(&cfg, &tokenFile, usage)
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
	token, err := recordsAdminToken(tokenFile)
	if err != nil {
		return cfg, err
	}
	cfg.RecordsAdminToken = token
	return cfg, nil
}

// recordsAdminTokenEnv holds the records admin's token, as the file of
// -records-admin-token-file does: the token has no flag of its own, so
// that it never shows in the process list.
const recordsAdminTokenEnv = "PAYMENTS_RECORDS_ADMIN_TOKEN"

// minTokenLength is the shortest records admin token taken: one that can
// be guessed opens the door that makes charges run again.
const minTokenLength = 16

// recordsAdminToken reads the records admin's token from file, if named,
// or from recordsAdminTokenEnv: "" if neither is set.
func recordsAdminToken(file string) (string, error) {
	env, inEnv := os.LookupEnv(recordsAdminTokenEnv)
	var token string
	switch {
	case file != "" && inEnv:
		return "", fmt.Errorf("give the records admin's token in -records-admin-token-file or in %s, not both", recordsAdminTokenEnv)
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("-records-admin-token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	case inEnv:
		token = strings.TrimSpace(env)
	default:
		return "", nil
	}
	if len(token) < minTokenLength || strings.ContainsAny(token, " \t\r\n") {
		return "", fmt.Errorf("the records admin's token must be at least %d characters, without spaces (generate one: openssl rand -hex 32)", minTokenLength)
	}
	return token, nil
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

// newFlagSet defines the command's flags on cfg (and tokenFile), their
// defaults its values; the usage goes to usage.
func newFlagSet(cfg *app.Config, tokenFile *string, usage io.Writer) *flag.FlagSet {
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
	fs.StringVar(&cfg.AdminAddr, "admin-addr", cfg.AdminAddr, "admin listen address for /metrics and /debug/provider, which Prometheus may scrape from another host (default: served on -addr)")
	fs.StringVar(&cfg.RecordsAdminAddr, "records-admin-addr", cfg.RecordsAdminAddr, "listen address of the records admin /idemadmin that idemctl -admin talks to, which can make a charge run again: it serves loopback peers only, unless a token is given (default: none)")
	fs.StringVar(tokenFile, "records-admin-token-file", *tokenFile, "a file holding the records admin's token (or set "+recordsAdminTokenEnv+"): with it, the records admin serves any peer that sends Authorization: Bearer <token>, and no one without")
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
