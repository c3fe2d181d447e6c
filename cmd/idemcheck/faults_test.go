package main

import (
	"testing"
)

// TestHandMadeCorrect: the hand-written middleware without a planted fault
// passes every case, so each fault below is what makes its case fail.
func TestHandMadeCorrect(t *testing.T) {
	srv := handMadeServer(t, faults{})
	code, rep, stderr := runJSON(t, fullArgs(srv.URL, "-strict")...)
	if code != 0 {
		t.Fatalf("exit status %d, want 0%s\nstderr: %s", code, failures(rep), stderr)
	}
	for id, r := range resultsByID(t, rep) {
		if r.Status != "pass" {
			t.Errorf("%s: %s %s", id, r.Status, r.Detail)
		}
	}
}

// TestPlantedFaults: each fault that idempotency implementations are known
// to have is planted alone, and idemcheck must report it with the right
// case failing at the right level.
func TestPlantedFaults(t *testing.T) {
	type want struct{ id, level string }
	tests := []struct {
		name  string
		f     faults
		fails []want
	}{
		{"stored 500s are replayed", faults{replay5xx: true},
			[]want{{"failure/not-replayed", "MAY"}}},
		{"a 5xx leaves the key stuck in 409", faults{stuckOn5xx: true},
			[]want{{"failure/released", "SHOULD"}}},
		{"concurrent retries are queued instead of 409", faults{queue: true},
			[]want{{"concurrent/409", "SHOULD"}}},
		{"no payload fingerprint", faults{noFingerprint: true},
			[]want{{"payload/changed", "MUST"}, {"payload/changed-422", "SHOULD"}}},
		{"quoted and bare spellings are two keys", faults{rawKey: true},
			[]want{{"key/bare-token", "SHOULD"}, {"key/parameters", "SHOULD"}}},
		{"a bare key is a 500", faults{bare500: true},
			[]want{{"key/bare-token", "SHOULD"}}},
		{"a quoted key is a 500", faults{quoted500: true},
			[]want{{"key/sf-string", "MUST"}}},
		{"a bare key drops the connection", faults{bareAbort: true},
			[]want{{"key/bare-token", "SHOULD"}}},
		{"the first of two key lines is used", faults{firstLine: true},
			[]want{{"key/two-lines", "SHOULD"}}},
		{"a replay carries another request's body", faults{sharedBuffer: true},
			[]want{{"replay/own-response", "MUST"}, {"replay/body", "SHOULD"}}},
		{"a replay goes to another identity", faults{noScope: true},
			[]want{{"tenant/isolated", "MUST"}}},
		{"a second execution for one key", faults{forget: true},
			[]want{{"replay/once", "MUST"}, {"concurrent/once", "MUST"}}},
		{"keys cut short, records kept per payload", faults{cutKeys: true},
			[]want{{"key/over-long", "MUST"}, {"payload/changed", "SHOULD"}, {"payload/changed-422", "SHOULD"}}},
		{"a second execution marked as a replay", faults{markOnly: true},
			[]want{{"replay/once", "MUST"}, {"concurrent/once", "MUST"}, {"replay/marker", "MAY"}}},
		{"errors are neither problem+json nor linked", faults{plainErrors: true},
			[]want{{"problem/json", "SHOULD"}, {"problem/docs-link", "SHOULD"}, {"problem/link-header", "MAY"}}},
		{"safe methods are recorded", faults{guardGet: true},
			[]want{{"safe/untouched", "SHOULD"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := handMadeServer(t, tt.f)
			code, rep, stderr := runJSON(t, fullArgs(srv.URL)...)
			if code == 2 {
				t.Fatalf("exit status 2: %s", stderr)
			}
			byID := resultsByID(t, rep)
			wantExit := 0
			for _, w := range tt.fails {
				r := byID[w.id]
				if r.Status != "fail" || r.Level != w.level {
					t.Errorf("%s: %s %s (%s), want a %s failure", w.id, r.Status, r.Level, r.Detail, w.level)
				}
				if w.level == "MUST" {
					wantExit = 1
				}
			}
			if tr := rep.Targets[0]; tr.Requests > tr.Announced {
				t.Errorf("sent %d requests, announced at most %d", tr.Requests, tr.Announced)
			}
			if code != wantExit || rep.Exit != code {
				t.Errorf("exit status %d (report says %d), want %d%s", code, rep.Exit, wantExit, failures(rep))
			}
			t.Logf("report:%s", failures(rep))
		})
	}
}

// TestStrictCountsShould: with -strict a SHOULD failure makes the exit
// status 1.
func TestStrictCountsShould(t *testing.T) {
	srv := handMadeServer(t, faults{stuckOn5xx: true})
	code, rep, _ := runJSON(t, fullArgs(srv.URL, "-strict")...)
	if code != 1 || !rep.Strict {
		t.Fatalf("exit status %d with -strict and a SHOULD failure, want 1%s", code, failures(rep))
	}
	if r := resultsByID(t, rep)["failure/released"]; !r.Counts {
		t.Errorf("failure/released does not count under -strict: %+v", r)
	}
}
