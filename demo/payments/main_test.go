package main

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFlagsAndEnvironment(t *testing.T) {
	t.Setenv("PAYMENTS_PROVIDER_LATENCY", "7ms")
	t.Setenv("PAYMENTS_FRAMEWORK", "echo")
	cfg, err := parseFlags([]string{"-framework", "fiber", "-ttl", "1h", "-provider-failure-rate", "0.5"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ProviderLatency != 7*time.Millisecond || cfg.Framework != "fiber" || cfg.TTL != time.Hour ||
		cfg.ProviderFailureRate != 0.5 || cfg.Addr != "127.0.0.1:8080" || cfg.DB != "payments.db" || cfg.Lease != 30*time.Second {
		t.Fatalf("config %+v", cfg)
	}
	for _, args := range [][]string{{"-provider-failure-rate", "2"}, {"-ttl", "soon"}, {"extra"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) accepted bad input", args)
		}
	}
	t.Setenv("PAYMENTS_LEASE", "forever")
	if _, err := parseFlags(nil); err == nil || !strings.Contains(err.Error(), "PAYMENTS_LEASE") {
		t.Errorf("a bad environment variable gave %v", err)
	}
}

// TestCommandRunsAndStopsGracefully runs the demo as `go run ./demo/payments`
// would, with no other set-up: it creates payments.db where it runs, serves
// a charge, and exits cleanly on SIGTERM.
func TestCommandRunsAndStopsGracefully(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "payments")
	if out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
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
