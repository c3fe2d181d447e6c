package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/demo/payments/internal/nodetest"
)

// stripeNodeDir is the folder of the stripe-node program: sdk.js, and the
// package.json and package-lock.json that pin the npm package stripe.
const stripeNodeDir = "../../testdata/stripe-node"

// TestStripeNodeSDK drives stripe-node (npm's stripe, installed by the
// test as its lockfile pins it), with its own generated keys and
// maxNetworkRetries 3, through the storm's flaky proxy against the demo:
// 300 charges and 100 refunds, on SQLite and PostgreSQL (sdkStorm).
func TestStripeNodeSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: stripe-node comes from npm; the full run installs it")
	}
	testStripeSDK(t, newStripeNode(t))
}

// stripeNode drives stripe-node through testdata/stripe-node/sdk.js.
type stripeNode struct {
	node, modules string
}

func newStripeNode(t *testing.T) stripeNode {
	node := nodetest.Tool(t, "node")
	// stripe 22 declares Node.js 18 or later (Debian 12's nodejs).
	out, err := exec.Command(node, "-p", "process.versions.node.split('.')[0]").Output()
	if major, _ := strconv.Atoi(strings.TrimSpace(string(out))); err != nil || major < 18 {
		t.Fatalf("stripe-node 22 needs Node.js 18 or later; %s is %s (%v)", node, strings.TrimSpace(string(out)), err)
	}
	return stripeNode{node: node, modules: nodetest.Modules(t, stripeNodeDir, "stripe-node")}
}

func (stripeNode) Name() string             { return "stripe-node" }
func (stripeNode) IdempotencyError() string { return "StripeIdempotencyError" }

// Calls runs sdk.js with the calls, and reads what it reports of each.
func (s stripeNode) Calls(t *testing.T, base, secret string, ops []sdkOp) []sdkResult {
	plan, err := json.Marshal(map[string]any{"url": base, "secret": secret, "workers": 20, "ops": ops})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := s.run(ctx, plan, filepath.Join(stripeNodeDir, "sdk.js"))
	if err != nil {
		t.Fatal(err)
	}
	var results []sdkResult
	for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
		var r sdkResult
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("sdk.js printed %q: %v", sc.Bytes(), err)
		}
		results = append(results, r)
	}
	return results
}

// run runs a Node.js program with stripe-node on NODE_PATH, stdin on its
// standard input, and returns what it printed.
func (s stripeNode) run(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, s.node, args...)
	cmd.Env = append(os.Environ(), "NODE_PATH="+s.modules)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, &nodeError{args, err, stdout.String(), stderr.String()}
	}
	return stdout.Bytes(), nil
}

type nodeError struct {
	args           []string
	err            error
	stdout, stderr string
}

func (e *nodeError) Error() string {
	return "node " + e.args[0] + ": " + e.err.Error() + "\n" + e.stdout + "\n" + e.stderr
}
