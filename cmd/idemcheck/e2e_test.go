package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The flags every full run gives: a second identity, and the test servers'
// slow and failure hints.
func fullArgs(url string, extra ...string) []string {
	return append([]string{
		"-url", url + "/v1/things",
		"-d", `{"name":"thing {{unique}}","size":3}`,
		"-H", "Authorization: Bearer acct_a",
		"-H", "Content-Type: application/json",
		"-tenant2", "Authorization: Bearer acct_b",
		"-slow-header", delayHeader + ": 1",
		"-fail-header", failHeader + ": 1",
		"-json",
	}, extra...)
}

// runJSON runs idemcheck with args and decodes its JSON report.
func runJSON(t *testing.T, args ...string) (int, jsonReport, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(args, &stdout, &stderr)
	var rep jsonReport
	if code != 2 {
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatalf("exit %d, report is not JSON: %v\n%s\nstderr: %s", code, err, stdout.String(), stderr.String())
		}
	}
	return code, rep, stderr.String()
}

func resultsByID(t *testing.T, rep jsonReport) map[string]jsonResult {
	t.Helper()
	if len(rep.Targets) != 1 {
		t.Fatalf("%d targets in the report, want 1", len(rep.Targets))
	}
	m := map[string]jsonResult{}
	for _, r := range rep.Targets[0].Results {
		m[r.ID] = r
	}
	return m
}

// failures lists the failed results, for test messages.
func failures(rep jsonReport) string {
	var b strings.Builder
	for _, t := range rep.Targets {
		for _, r := range t.Results {
			if r.Status != "pass" {
				b.WriteString("\n  " + r.Status + " " + r.Level + " " + r.ID + ": " + r.Detail)
			}
		}
	}
	return b.String()
}

// TestReference runs idemcheck end to end against idemkit's own net/http
// middleware: every case runs, and every case passes.
func TestReference(t *testing.T) {
	srv := referenceServer(t)
	junit := filepath.Join(t.TempDir(), "report.xml")
	code, rep, stderr := runJSON(t, fullArgs(srv.URL, "-strict", "-junit", junit)...)
	if code != 0 {
		t.Fatalf("exit status %d, want 0%s\nstderr: %s", code, failures(rep), stderr)
	}
	byID := resultsByID(t, rep)
	if len(byID) != len(rules) {
		t.Fatalf("%d results, want one per rule (%d)", len(byID), len(rules))
	}
	for _, ru := range rules {
		if r := byID[ru.id]; r.Status != "pass" {
			t.Errorf("%s %s: %s %s", ru.level, ru.id, r.Status, r.Detail)
		}
	}
	tr := rep.Targets[0]
	if tr.Requests > tr.Announced || tr.Announced != 42 {
		t.Errorf("sent %d requests, announced %d", tr.Requests, tr.Announced)
	}
	if !strings.Contains(stderr, "at most 42 requests to POST "+srv.URL+"/v1/things") {
		t.Errorf("no announcement of the requests before the run; stderr: %s", stderr)
	}

	// The JUnit file has one passing testcase per rule.
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var ju junitSuites
	if err := xml.Unmarshal(b, &ju); err != nil {
		t.Fatalf("JUnit report: %v\n%s", err, b)
	}
	if ju.Tests != len(rules) || ju.Failures != 0 || ju.Skipped != 0 {
		t.Errorf("JUnit: %d tests, %d failures, %d skipped; want %d, 0, 0", ju.Tests, ju.Failures, ju.Skipped, len(rules))
	}
}

// TestReferenceTable checks the readable report of a passing run.
func TestReferenceTable(t *testing.T) {
	srv := referenceServer(t)
	var stdout, stderr bytes.Buffer
	args := fullArgs(srv.URL)
	args = args[:len(args)-1] // no -json
	if code := run(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit status %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	for _, want := range []string{
		"idemcheck POST " + srv.URL + "/v1/things\n",
		"STATUS  LEVEL   SECTION",
		"pass    MUST    2.6              replay/once",
		"MUST 5 passed, 0 failed; SHOULD 23 passed, 0 failed; MAY 6 passed, 0 failed",
		"exit status 0: no MUST case failed",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if stderr.Len() == 0 || strings.Contains(stderr.String(), "\r") {
		t.Errorf("stderr should hold the announcement and no progress line (not a terminal): %q", stderr.String())
	}
}
