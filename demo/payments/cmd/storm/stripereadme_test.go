package main

import (
	"context"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// readmeBlock returns the README's code block that opens with fence and
// begins with first.
func readmeBlock(t *testing.T, fence, first string) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), fence+"\n"+first)
	block, _, closed := strings.Cut(block, "\n```\n")
	if !ok || !closed {
		t.Fatalf("README.md has no %s block beginning %q", fence, first)
	}
	return first + block + "\n"
}

// TestStripeREADMEPrograms runs the README's stripe-go and stripe-node
// programs, as the README shows them, against the demo (its address put
// in for 127.0.0.1:8080): each charges once under its key, gets the
// charge replayed, and sees the key reused for another amount as its
// SDK's idempotency error.
func TestStripeREADMEPrograms(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	check := func(t *testing.T, demoURL, out, want string) {
		t.Helper()
		if out != want {
			t.Errorf("the program printed %q, want %q", out, want)
		}
		var bal struct{ Charged, Charges int64 }
		var prov struct{ Authorizations int64 }
		if err := getJSON(ctx, demoURL+"/v1/balance", "Bearer sk_test_123", &bal); err != nil {
			t.Fatal(err)
		}
		if err := getJSON(ctx, demoURL+"/debug/provider", "Bearer sk_test_123", &prov); err != nil {
			t.Fatal(err)
		}
		if bal.Charges != 1 || bal.Charged != 1999 || prov.Authorizations != 1 {
			t.Errorf("balance %+v, provider %+v: want one charge of 1999, authorized once", bal, prov)
		}
	}

	t.Run("stripe-go", func(t *testing.T) {
		src := readmeBlock(t, "```go", "package main")
		if formatted, err := format.Source([]byte(src)); err != nil || string(formatted) != src {
			t.Fatalf("the README's stripe-go program is not gofmt-formatted (%v):\n%s", err, formatted)
		}
		demoURL := startDemo(t, filepath.Join(t.TempDir(), "p.db"))
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(pointAt(t, src, "http://127.0.0.1:8080", demoURL)), 0o644); err != nil {
			t.Fatal(err)
		}
		// Built in the demo's module, which requires stripe-go, with
		// the test's race flag, so that the packages built for the test
		// serve.
		bin := filepath.Join(dir, "stripe-go-program")
		args := []string{"build", "-o", bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		if out, err := exec.CommandContext(ctx, "go", append(args, filepath.Join(dir, "main.go"))...).CombinedOutput(); err != nil {
			t.Fatalf("go build of the README's stripe-go program: %v\n%s", err, out)
		}
		// stripe-go logs the idempotency error on stderr.
		var stderr strings.Builder
		cmd := exec.CommandContext(ctx, bin)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("the README's stripe-go program: %v\n%s%s", err, out, stderr.String())
		}
		check(t, demoURL, string(out), "true true\ntrue\n")
	})

	t.Run("stripe-node", func(t *testing.T) {
		if testing.Short() {
			t.Skip("-short: stripe-node comes from npm; the full run installs it")
		}
		src := readmeBlock(t, "```js", "const Stripe = require('stripe');")
		node := newStripeNode(t)
		demoURL := startDemo(t, filepath.Join(t.TempDir(), "p.db"))
		port := demoURL[strings.LastIndex(demoURL, ":")+1:]
		file := filepath.Join(t.TempDir(), "charge.js")
		if err := os.WriteFile(file, []byte(pointAt(t, src, "port: 8080,", "port: "+port+",")), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := node.run(ctx, nil, file)
		if err != nil {
			t.Fatal(err)
		}
		check(t, demoURL, string(out), "true true\nStripeIdempotencyError idempotency_error\n")
	})
}

// pointAt replaces the README's address in a program, which must be
// there once.
func pointAt(t *testing.T, src, readme, addr string) string {
	t.Helper()
	if n := len(regexp.MustCompile(regexp.QuoteMeta(readme)).FindAllString(src, -1)); n != 1 {
		t.Fatalf("the program names %q %d times, want once:\n%s", readme, n, src)
	}
	return strings.Replace(src, readme, addr, 1)
}
