package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestOperationsTranscript: the session that docs/operations.md shows in
// "Finding a key: idemctl" is what idemctl prints for the same record:
// the same fields in the same order, the same state, status, headers and
// body size (times and digests differ from run to run), and forget's line.
func TestOperationsTranscript(t *testing.T) {
	src, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(src), "## Finding a key: idemctl")
	if !ok {
		t.Fatal("docs/operations.md has no section \"Finding a key: idemctl\"")
	}
	_, block, _ := strings.Cut(section, "```console\n")
	block, _, _ = strings.Cut(block, "```")
	var getDoc, forgetDoc []string
	into := &getDoc
	for _, line := range strings.Split(strings.TrimSpace(block), "\n") {
		switch {
		case strings.HasPrefix(line, "$ idemctl get "):
			into = &getDoc
		case strings.HasPrefix(line, "$ idemctl forget "):
			into = &forgetDoc
		default:
			*into = append(*into, line)
		}
	}
	if len(getDoc) == 0 || len(forgetDoc) == 0 {
		t.Fatalf("the section's console block shows no get or no forget:\n%s", block)
	}

	tg := sqliteTarget(t)
	a := newApp(tg.store)
	if code, _ := a.post(t, "acct_42", "order-7"); code != 201 {
		t.Fatalf("first request: %d", code)
	}
	tg.close(t)
	code, out, errOut := ctl(t, "", append(append([]string{"get"}, tg.args...), "-scope", "acct_42", "-key", "order-7")...)
	if code != 0 {
		t.Fatalf("get: exit %d: %s", code, errOut)
	}
	got := strings.Split(strings.TrimSpace(out), "\n")
	if len(got) != len(getDoc) {
		t.Fatalf("get printed %d lines, the docs show %d:\n%s", len(got), len(getDoc), out)
	}
	field := regexp.MustCompile(`^(\S+(?: \S+)?)\s{2,}(.*)$`)
	for i := range got {
		g, d := field.FindStringSubmatch(got[i]), field.FindStringSubmatch(getDoc[i])
		if g == nil || d == nil || g[1] != d[1] {
			t.Fatalf("line %d: idemctl printed %q, the docs show %q", i+1, got[i], getDoc[i])
		}
		switch g[1] {
		case "state", "expired", "status", "headers", "body size", "fingerprint":
			if g[2] != d[2] {
				t.Errorf("%s: idemctl printed %q, the docs show %q", g[1], g[2], d[2])
			}
		case "location":
			// The docs cut each digest short with "…": what they show
			// must begin what idemctl prints, for acct_42 and order-7.
			shown := regexp.MustCompile(`([0-9a-f]+)…`).ReplaceAllString(d[2], "$1")
			cut := regexp.MustCompile(`[0-9a-f]{8,}`)
			got := cut.FindAllString(g[2], -1)
			docs := cut.FindAllString(shown, -1)
			if len(got) != 2 || len(docs) != 2 || !strings.HasPrefix(got[0], docs[0]) || !strings.HasPrefix(got[1], docs[1]) ||
				cut.ReplaceAllString(g[2], "X") != cut.ReplaceAllString(shown, "X") {
				t.Errorf("location: idemctl printed %q, the docs show %q: the digests of acct_42 and order-7 differ", g[2], d[2])
			}
		}
	}
	code, out, errOut = ctl(t, "", append(append([]string{"forget"}, tg.args...), "-scope", "acct_42", "-key", "order-7")...)
	if code != 0 || strings.TrimSpace(out) != strings.Join(forgetDoc, "\n") {
		t.Fatalf("forget: exit %d, printed %q%s; the docs show %q", code, out, errOut, strings.Join(forgetDoc, "\n"))
	}
}

// TestAdminProblemsDocumented: every problem type the admin handler
// answers with has its anchor in docs/operations.md, where its type URI
// points.
func TestAdminProblemsDocumented(t *testing.T) {
	var handler []byte
	for _, name := range []string{"handler.go", "door.go"} {
		src, err := os.ReadFile("../../core/idemadmin/" + name)
		if err != nil {
			t.Fatal(err)
		}
		handler = append(handler, src...)
	}
	docs, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile(`(?:problem\(w, |problemOf\(|&refusal\{)http\.Status\w+, "([a-z-]+)"`).FindAllStringSubmatch(string(handler), -1)
	if len(names) < 7 {
		t.Fatalf("found %d problems in the handler: the pattern no longer matches its code", len(names))
	}
	for _, n := range names {
		if !strings.Contains(string(docs), `<a id="admin-`+n[1]+`"></a>`) {
			t.Errorf("docs/operations.md has no anchor admin-%s for the handler's problem type", n[1])
		}
	}
}

// TestGettingIdemctlAsDocumented: the README's "Getting idemctl" block,
// run from the clone's root as it says, gives a binary that runs, and
// puts it outside the clone (GOBIN, here a folder of the test's); a
// `go build -o` the page offers writes into a folder .gitignore ignores.
// docs/operations.md gives the same command.
func TestGettingIdemctlAsDocumented(t *testing.T) {
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(src), "<!-- get: idemctl -->\n```sh\n")
	if !ok {
		t.Fatal("README.md has no <!-- get: idemctl --> sh block")
	}
	block, _, _ = strings.Cut(block, "```")
	if got := strings.TrimSpace(block); got != "go install ./cmd/idemctl" {
		t.Fatalf("the README's block is %q; this test runs `go install ./cmd/idemctl`: change both together", got)
	}
	ops, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ops), "`go install ./cmd/idemctl`") {
		t.Error("docs/operations.md does not say how to get idemctl (`go install ./cmd/idemctl`)")
	}

	gobin := t.TempDir()
	install := exec.Command("go", "install", "./cmd/idemctl")
	install.Dir = "../.."
	install.Env = append(os.Environ(), "GOBIN="+gobin)
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("go install ./cmd/idemctl, in the clone's root: %v\n%s", err, out)
	}
	if out, err := exec.Command(filepath.Join(gobin, "idemctl"), "-h").CombinedOutput(); err != nil || !strings.Contains(string(out), "idemctl get") {
		t.Fatalf("the installed idemctl -h: %v\n%s", err, out)
	}

	ignore, err := os.ReadFile("../../.gitignore")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("`go build -o (\\S+) ").FindAllStringSubmatch(string(src), -1) {
		top, _, inFolder := strings.Cut(m[1], "/")
		if !inFolder || !slices.Contains(strings.Fields(string(ignore)), "/"+top+"/") {
			t.Errorf("the README builds idemctl into %s, which .gitignore does not ignore", m[1])
		}
	}
}
