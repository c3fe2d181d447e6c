package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/server"
)

// binDir holds the demo's binary, built once for the tests that run it as
// a user would.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "payments-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var buildOnce = sync.OnceValues(func() (string, error) {
	exe := filepath.Join(binDir, "payments")
	if out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		return "", fmt.Errorf("build: %v\n%s", err, out)
	}
	return exe, nil
})

// binary returns the path of the demo's command, built from this package.
func binary(t *testing.T) string {
	t.Helper()
	exe, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// TestHelpExitsZero: asking for help is not an error: the usage goes out,
// the exit status is 0 and nothing is logged at level ERROR.
func TestHelpExitsZero(t *testing.T) {
	exe := binary(t)
	for _, arg := range []string{"-h", "-help", "--help"} {
		var out bytes.Buffer
		cmd := exec.Command(exe, arg)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Errorf("payments %s: %v, want exit status 0:\n%s", arg, err, out.String())
			continue
		}
		for _, want := range []string{"-addr", "-lease", "-fault-injection", "-events", "-webhook-secret", "-settle-every", "-grpc-addr", "fiberv3", "echov5", "PAYMENTS_"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("payments %s: the usage lacks %q:\n%s", arg, want, out.String())
			}
		}
		if strings.Contains(out.String(), "level=ERROR") {
			t.Errorf("payments %s logged an error:\n%s", arg, out.String())
		}
	}
}

func TestFlagsAndEnvironment(t *testing.T) {
	t.Setenv("PAYMENTS_PROVIDER_LATENCY", "7ms")
	t.Setenv("PAYMENTS_FRAMEWORK", "echo")
	t.Setenv("PAYMENTS_ADMIN_ADDR", "127.0.0.1:9090")
	cfg, err := parseFlags([]string{"-framework", "fiber", "-ttl", "1h", "-provider-failure-rate", "0.5"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ProviderLatency != 7*time.Millisecond || cfg.Framework != "fiber" || cfg.TTL != time.Hour ||
		cfg.ProviderFailureRate != 0.5 || cfg.Addr != "127.0.0.1:8080" || cfg.DB != "payments.db" || cfg.Lease != 30*time.Second ||
		cfg.AdminAddr != "127.0.0.1:9090" || cfg.Records != "" || cfg.FaultInjection {
		t.Fatalf("config %+v", cfg)
	}
	if cfg, err := parseFlags([]string{"-fault-injection"}, io.Discard); err != nil || !cfg.FaultInjection {
		t.Errorf("-fault-injection: %+v (%v), want fault injection on", cfg, err)
	}
	t.Setenv("PAYMENTS_FAULT_INJECTION", "true")
	if cfg, err := parseFlags(nil, io.Discard); err != nil || !cfg.FaultInjection {
		t.Errorf("PAYMENTS_FAULT_INJECTION=true: %+v (%v), want fault injection on", cfg, err)
	}
	if cfg, err := parseFlags([]string{"-fault-injection=false"}, io.Discard); err != nil || cfg.FaultInjection {
		t.Errorf("-fault-injection=false over PAYMENTS_FAULT_INJECTION=true: %+v (%v), want it off", cfg, err)
	}
	if cfg, err := parseFlags([]string{"-records", "redis://:secret@127.0.0.1:6379/0"}, io.Discard); err != nil ||
		cfg.Records != "redis://:secret@127.0.0.1:6379/0" || strings.Contains(cfg.RecordsLabel(), "secret") {
		t.Errorf("-records redis://: %+v (%v), label %q", cfg, err, cfg.RecordsLabel())
	}
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	if cfg, err := parseFlags([]string{"-events", "redis://:secret@127.0.0.1:6379/1", "-webhook-secret", secret, "-settle-every", "250ms", "-webhooks=false"}, io.Discard); err != nil ||
		cfg.Events != "redis://:secret@127.0.0.1:6379/1" || cfg.WebhookSecret != secret || cfg.SettleEvery != 250*time.Millisecond || cfg.Webhooks ||
		strings.Contains(cfg.EventsLabel(), "secret") {
		t.Errorf("-events, -webhook-secret, -settle-every, -webhooks: %+v (%v)", cfg, err)
	}
	if cfg, _ := parseFlags(nil, io.Discard); cfg.SettleEvery != time.Second || !cfg.Webhooks || cfg.Events != "" || cfg.WebhookSecret != "" {
		t.Errorf("the events' defaults: %+v", cfg)
	}
	if cfg, _ := parseFlags(nil, io.Discard); cfg.GRPCAddr != "" {
		t.Errorf("a gRPC listener by default: %q", cfg.GRPCAddr)
	}
	t.Setenv("PAYMENTS_GRPC_ADDR", "127.0.0.1:9091")
	if cfg, err := parseFlags([]string{"-framework", "fiberv3"}, io.Discard); err != nil || cfg.GRPCAddr != "127.0.0.1:9091" || cfg.Framework != "fiberv3" {
		t.Errorf("PAYMENTS_GRPC_ADDR, -framework fiberv3: %+v (%v)", cfg, err)
	}
	for _, args := range [][]string{{"-provider-failure-rate", "2"}, {"-ttl", "soon"}, {"extra"}, {"-records", "memcached://127.0.0.1"}, {"-records", "redis://127.0.0.1:6379/x"},
		{"-events", "kafka://127.0.0.1"}, {"-webhook-secret", "whsec_short"}, {"-webhook-secret", "not base64!"}, {"-settle-every", "-1s"}} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("parseFlags(%q) accepted bad input", args)
		}
	}
	t.Setenv("PAYMENTS_LEASE", "forever")
	if _, err := parseFlags(nil, io.Discard); err == nil || !strings.Contains(err.Error(), "PAYMENTS_LEASE") {
		t.Errorf("a bad environment variable gave %v", err)
	}
}

// TestREADMEFlags: the README's table of flags lists every flag of the
// command, and no other, each with its default; its -framework row names
// every framework.
func TestREADMEFlags(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(readme), "\n") {
		cells := strings.Split(line, " | ")
		if name, ok := strings.CutPrefix(cells[0], "| `-"); ok && len(cells) == 3 {
			rows[strings.TrimSuffix(name, "`")] = cells[1:]
		}
	}
	cfg := app.DefaultConfig()
	var tokenFile string
	fs := newFlagSet(&cfg, &tokenFile, io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		row, ok := rows[f.Name]
		if !ok {
			t.Errorf("README.md: no row for -%s", f.Name)
			return
		}
		delete(rows, f.Name)
		if f.DefValue == "" || f.DefValue == "false" || f.DefValue == "0" {
			return // "none", "off" or a sentence
		}
		_, def, _ := strings.Cut(row[0], "`")
		def, _, _ = strings.Cut(def, "`")
		if want, err := time.ParseDuration(f.DefValue); err == nil {
			if got, err := time.ParseDuration(def); err == nil && got == want {
				return
			}
		}
		if def != f.DefValue {
			t.Errorf("README.md: the row of -%s gives the default %q, not %q", f.Name, row[0], f.DefValue)
		}
	})
	for name := range rows {
		t.Errorf("README.md: a row for -%s, which the command does not have", name)
	}
	var frameworks string
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "| `-framework` |") {
			frameworks = line
		}
	}
	for _, fw := range server.Frameworks {
		if !strings.Contains(frameworks, "`"+fw+"`") {
			t.Errorf("README.md: the -framework row does not name %s: %s", fw, frameworks)
		}
	}
}

// TestFlagsRefuseTimesIdemkitCannotKeep: a -ttl or -lease that idemkit's
// Engine refuses (a TTL up to 100 years, a lease from 100 ms to 100 years)
// is a bad flag, from the command line or the environment:
// parseFlags names it, and the command exits 2 with that message, not
// with a panic.
func TestFlagsRefuseTimesIdemkitCannotKeep(t *testing.T) {
	const century = "876000h"
	for _, args := range [][]string{{"-ttl", century}, {"-lease", "100ms"}, {"-lease", century, "-ttl", century}, {"-ttl", "5m", "-lease", "1s"}} {
		if _, err := parseFlags(args, io.Discard); err != nil {
			t.Errorf("parseFlags(%q): %v, want it accepted", args, err)
		}
	}
	bad := map[string][]string{
		"-ttl":   {"876000h0m0.001s", "1000000h", "0s", "-1s"},
		"-lease": {"99ms", "0s", "-30s", "876000h0m0.001s", "2562047h"},
	}
	exe := binary(t)
	for flag, values := range bad {
		for _, v := range values {
			if _, err := parseFlags([]string{flag, v}, io.Discard); err == nil || !strings.Contains(err.Error(), flag) {
				t.Errorf("parseFlags(%s %s): %v, want an error naming %s", flag, v, err, flag)
			}
			env := app.EnvName(strings.TrimPrefix(flag, "-"))
			t.Setenv(env, v)
			if _, err := parseFlags(nil, io.Discard); err == nil || !strings.Contains(err.Error(), flag) {
				t.Errorf("%s=%s: %v, want an error naming %s", env, v, err, flag)
			}
			os.Unsetenv(env)
		}
		// The command: exit status 2, the reason, no panic. One value
		// each: each run builds nothing, but starts a process.
		var out bytes.Buffer
		cmd := exec.Command(exe, flag, values[0], "-addr", "127.0.0.1:0")
		cmd.Dir, cmd.Stdout, cmd.Stderr = t.TempDir(), &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || strings.Contains(out.String(), "panic") || !strings.Contains(out.String(), flag+" must be") {
			t.Errorf("payments %s %s: %v, want exit status 2 and the reason, no panic:\n%s", flag, values[0], err, out.String())
		}
	}
}

// TestTTLOutlivesTheWebhookToleranceAndTheClaimDelay: a -ttl shorter
// than the webhooks' signature tolerance (5 minutes: a captured webhook
// replayed within it passes the signature check) or than the event
// stream's claim delay (-lease: an entry claimed again after it) would let
// such a delivery find its event's record gone. It is refused at start,
// from the flags (exit status 2) and from app.Open, with a message that
// names both; a -ttl of both or more is taken.
func TestTTLOutlivesTheWebhookToleranceAndTheClaimDelay(t *testing.T) {
	for _, args := range [][]string{{"-ttl", "1m"}, {"-ttl", "299s"}, {"-ttl", "10m", "-lease", "20m"}} {
		_, err := parseFlags(args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "-ttl") || !strings.Contains(err.Error(), "5m0s") || !strings.Contains(err.Error(), "-lease") {
			t.Errorf("parseFlags(%q): %v, want an error naming -ttl, the 5m0s tolerance and -lease", args, err)
		}
	}
	for _, args := range [][]string{{"-ttl", "5m"}, {"-ttl", "20m", "-lease", "20m"}} {
		if _, err := parseFlags(args, io.Discard); err != nil {
			t.Errorf("parseFlags(%q): %v, want it accepted", args, err)
		}
	}
	cfg := app.DefaultConfig()
	cfg.DB, cfg.TTL = filepath.Join(t.TempDir(), "p.db"), time.Minute
	if a, err := app.Open(t.Context(), cfg, quietLog()); err == nil {
		a.Close()
		t.Error("app.Open with a TTL of 1m: started, want it refused")
	}
	var out bytes.Buffer
	// Bounded: a demo that takes the flag serves until killed.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), "-ttl", "3s", "-addr", "127.0.0.1:0")
	cmd.Dir, cmd.Stdout, cmd.Stderr = t.TempDir(), &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(out.String(), "-ttl must be") {
		t.Errorf("payments -ttl 3s: %v, want exit status 2 and the reason:\n%s", err, out.String())
	}
}

// TestCommandRunsAndStopsGracefully runs the demo as `go run ./demo/payments`
// would, with no other set-up: it creates payments.db where it runs, serves
// a charge, and exits cleanly on SIGTERM.
func TestCommandRunsAndStopsGracefully(t *testing.T) {
	exe := binary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	var logs bytes.Buffer
	cmd := exec.Command(exe)
	cmd.Dir, cmd.Stderr = dir, &logs
	cmd.Env = append(os.Environ(), "PAYMENTS_ADDR="+addr, "PAYMENTS_PROVIDER_LATENCY=1ms")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	base := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not come up:\n%s", logs.String())
		}
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/charges", strings.NewReader(`{"amount":100,"currency":"usd","customer":"c"}`))
	req.Header.Set("Authorization", "Bearer acct_cmd")
	req.Header.Set("Idempotency-Key", `"cmd-1"`)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("charge: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, err := os.Stat(filepath.Join(dir, "payments.db")); err != nil {
		t.Fatalf("the default SQLite file was not created: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the demo did not stop on SIGTERM")
	}
	out := logs.String()
	for _, want := range []string{"payments demo listening", "framework=gin", "msg=request", "path=/v1/charges", "status=201", "shutting down"} {
		if !strings.Contains(out, want) {
			t.Fatalf("log lacks %q:\n%s", want, out)
		}
	}
}

// TestSecondSignalStopsAtOnce: during the shutdown grace, a second SIGTERM
// ends the process without waiting for the running requests.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	exe := binary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var logs bytes.Buffer
	cmd := exec.Command(exe, "-addr", addr, "-db", filepath.Join(t.TempDir(), "p.db"), "-provider-latency", "1m")
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	base := "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(base + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not come up:\n%s", logs.String())
		}
	}
	// A charge that keeps the first shutdown waiting.
	go func() {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/charges", strings.NewReader(`{"amount":100,"currency":"usd","customer":"c"}`))
		req.Header.Set("Authorization", "Bearer acct_signal")
		req.Header.Set("Idempotency-Key", `"sig-1"`)
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	// The charge is running (with the provider, for a minute) once the
	// demo's metrics count a request in flight.
	for deadline := time.Now().Add(30 * time.Second); !inFlight(t, base); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the charge never ran:\n%s", logs.String())
		}
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("the demo stopped on the first SIGTERM (%v) while a charge ran:\n%s", err, logs.String())
	case <-time.After(500 * time.Millisecond):
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the demo did not stop on the second SIGTERM:\n%s", logs.String())
	}
}

// inFlight reports whether the demo at base counts a request holding its
// key (the idemkit_in_flight gauge of its /metrics).
func inFlight(t *testing.T, base string) bool {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[0], "idemkit_in_flight") && f[1] != "0" {
			return true
		}
	}
	return false
}
