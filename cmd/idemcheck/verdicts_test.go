package main

import (
	"strings"
	"testing"
)

// The tests below run idemcheck against servers built to fool it: each
// verdict must follow what the server does, not what it claims.

// check runs idemcheck with every flag against the server at url, wants
// the exit status want, and returns the results by case and the report.
func check(t *testing.T, url string, want int, extra ...string) (map[string]jsonResult, jsonReport) {
	t.Helper()
	code, rep, stderr := runJSON(t, fullArgs(url, extra...)...)
	if code != want {
		t.Fatalf("exit status %d, want %d%s\nstderr: %s", code, want, failures(rep), stderr)
	}
	return resultsByID(t, rep), rep
}

// mustCases returns the rules whose own level is MUST.
func mustCases() []string {
	var ids []string
	for _, ru := range rules {
		if ru.level == must {
			ids = append(ids, ru.id)
		}
	}
	return ids
}

// TestQueuedConcurrentRetryIsAllowed: draft-07 asks for 409 on a concurrent
// retry with SHOULD (2.6, 2.7). A server that holds the retry until the
// first request finished and then replays its answer runs the request once:
// it exits 0, and only -strict makes the unmet SHOULD count.
func TestQueuedConcurrentRetryIsAllowed(t *testing.T) {
	srv := handMadeServer(t, faults{queue: true})
	byID, _ := check(t, srv.URL, 0)
	for _, id := range mustCases() {
		if r := byID[id]; r.Status != "pass" {
			t.Errorf("%s: %s %s %s, want a pass", id, r.Status, r.Level, r.Detail)
		}
	}
	if r := byID["concurrent/409"]; r.Status != "fail" || r.Level != "SHOULD" || r.Counts || !strings.Contains(r.Detail, "held") {
		t.Errorf("concurrent/409: %s %s counts=%v %q; want an unmet SHOULD that says the retry was held", r.Status, r.Level, r.Counts, r.Detail)
	}
	check(t, srv.URL, 1, "-strict")
}
