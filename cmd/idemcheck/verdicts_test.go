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

// TestReplayMarkerIsNotEvidence: a server that runs every request again and
// marks the answers to used keys Idempotent-Replayed: true fails the
// execution cases; the marker does not make a different answer a replay.
func TestReplayMarkerIsNotEvidence(t *testing.T) {
	srv := handMadeServer(t, faults{markOnly: true})
	byID, _ := check(t, srv.URL, 1)
	for _, id := range []string{"replay/once", "concurrent/once"} {
		r := byID[id]
		if r.Status != "fail" || r.Level != "MUST" || !strings.Contains(r.Detail, "marked "+replayedHeader) {
			t.Errorf("%s: %s %s %q; want a MUST failure that names the false marker", id, r.Status, r.Level, r.Detail)
		}
	}
	if r := byID["replay/marker"]; r.Status != "fail" {
		t.Errorf("replay/marker: %s %q; the marker was sent on answers that are not replays", r.Status, r.Detail)
	}
}

// TestReencodedReplay: a replay whose JSON is the first answer's value in
// other bytes is a replay, not a second execution; only the byte-for-byte
// SHOULD is unmet.
func TestReencodedReplay(t *testing.T) {
	srv := handMadeServer(t, faults{reencode: true})
	byID, _ := check(t, srv.URL, 0)
	if r := byID["replay/once"]; r.Status != "pass" {
		t.Errorf("replay/once: %s %q", r.Status, r.Detail)
	}
	if r := byID["replay/body"]; r.Status != "fail" || r.Level != "SHOULD" || !strings.Contains(r.Detail, "same JSON") {
		t.Errorf("replay/body: %s %s %q; want an unmet SHOULD: the same JSON, other bytes", r.Status, r.Level, r.Detail)
	}
}

// TestAnswersLongerThanTheReadCap: idemcheck keeps the first MiB of an
// answer; two answers that agree on it are not thereby identical.
func TestAnswersLongerThanTheReadCap(t *testing.T) {
	pad := maxResponseBody + 512
	t.Run("re-run, differing after the cap", func(t *testing.T) {
		srv := paddedServer(t, faults{forget: true}, pad)
		byID, _ := check(t, srv.URL, 1)
		if r := byID["replay/body"]; r.Status == "pass" || strings.Contains(r.Detail, "identical") {
			t.Errorf("replay/body: %s %q; the answers differ after the first MiB", r.Status, r.Detail)
		}
		if r := byID["replay/once"]; r.Status != "fail" || r.Level != "MUST" {
			t.Errorf("replay/once: %s %s %q; want a MUST failure", r.Status, r.Level, r.Detail)
		}
	})
	t.Run("replayed whole", func(t *testing.T) {
		srv := paddedServer(t, faults{}, pad)
		byID, _ := check(t, srv.URL, 0)
		if r := byID["replay/body"]; r.Status != "pass" || !strings.Contains(r.Detail, "byte-identical (") || strings.Contains(r.Detail, "(1048576 bytes)") {
			t.Errorf("replay/body: %s %q; want byte-identical over the whole answer, longer than 1 MiB", r.Status, r.Detail)
		}
	})
	t.Run("longer than idemcheck reads", func(t *testing.T) {
		defer func(n int64) { maxBodyRead = n }(maxBodyRead)
		maxBodyRead = 2 << 20
		srv := paddedServer(t, faults{}, 3<<20)
		byID, rep := check(t, srv.URL, 0)
		if r := byID["replay/body"]; r.Status != "not run" || !strings.Contains(r.Detail, "cannot compare") {
			t.Errorf("replay/body: %s %q; want not run: the answers cannot be compared", r.Status, r.Detail)
		}
		for _, r := range rep.Targets[0].Results {
			if r.Status == "fail" && r.Level == "MUST" {
				t.Errorf("%s: a MUST failure from answers that could not be read whole: %q", r.ID, r.Detail)
			}
		}
	})
}

// TestNoIdempotency: a target that ignores the key is told so, rather than
// blamed for cutting keys short or mixing up answers.
func TestNoIdempotency(t *testing.T) {
	t.Run("answers that identify the request", func(t *testing.T) {
		srv := httptestServer(t, &app{}) // no idempotency middleware at all
		byID, rep := check(t, srv.URL, 1)
		const want = "does not appear to implement idempotency keys"
		if r := byID["replay/once"]; r.Status != "fail" || !strings.Contains(r.Detail, want) {
			t.Errorf("replay/once: %s %q; want a failure saying the target %s", r.Status, r.Detail, want)
		}
		if d := rep.Targets[0].Diagnosis; !strings.Contains(d, want) {
			t.Errorf("diagnosis %q, want one saying the target %s", d, want)
		}
		noKeyClaims(t, byID)
	})
	t.Run("answers that never vary", func(t *testing.T) {
		srv := httptestServer(t, sameAnswer())
		byID, rep := check(t, srv.URL, 0)
		for _, id := range []string{"replay/once", "concurrent/once"} {
			if r := byID[id]; r.Status == "pass" {
				t.Errorf("%s passed (%q) although no answer can tell a replay from a second execution", id, r.Detail)
			}
		}
		if d := rep.Targets[0].Diagnosis; !strings.Contains(d, "no sign of implementing idempotency keys") {
			t.Errorf("diagnosis %q, want one saying the target shows no sign of implementing idempotency keys", d)
		}
		noKeyClaims(t, byID)
	})
}

// noKeyClaims checks that a target which keeps no keys is not told how it
// treats them.
func noKeyClaims(t *testing.T, byID map[string]jsonResult) {
	t.Helper()
	for _, id := range []string{"key/over-long", "key/bare-token", "key/parameters", "tenant/isolated"} {
		r := byID[id]
		if r.Status == "fail" || strings.Contains(r.Detail, "cut short") || strings.Contains(r.Detail, "another key") {
			t.Errorf("%s: %s %q; the target keeps no keys, so it cannot be said how it reads them", id, r.Status, r.Detail)
		}
	}
}
