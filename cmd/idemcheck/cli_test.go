package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
)

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no URL", []string{"-d", "x"}, "-url is required"},
		{"not an http URL", []string{"-url", "ftp://example.test/x"}, "not an http or https URL"},
		{"bad header", []string{"-url", "http://127.0.0.1:1/", "-H", "no colon"}, "is not a header"},
		{"safe method", []string{"-url", "http://127.0.0.1:1/", "-X", "GET"}, "safe method"},
		{"key in -H", []string{"-url", "http://127.0.0.1:1/", "-H", `Idempotency-Key: "k"`}, "sends its own keys"},
		{"tenant2 is tenant 1", []string{"-url", "http://127.0.0.1:1/", "-H", "Authorization: a", "-tenant2", "Authorization: a"}, "another identity"},
		{"-d with -openapi", []string{"-url", "http://127.0.0.1:1/", "-d", "x", "-openapi", "testdata/openapi.yaml"}, "exclude each other"},
		{"unknown flag", []string{"-url", "http://127.0.0.1:1/", "-nope"}, "flag provided but not defined"},
		{"stray argument", []string{"-url", "http://127.0.0.1:1/", "extra"}, "unexpected argument"},
		{"missing -d file", []string{"-url", "http://127.0.0.1:1/", "-d", "@testdata/none.json"}, "-d:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tt.args, &stdout, &stderr); code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tt.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}

// TestUnreachable: a target that does not answer is a connection error.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var stdout, stderr bytes.Buffer
	code := run([]string{"-url", "http://" + addr + "/v1/things", "-d", "{}"}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "target unreachable") {
		t.Errorf("exit status %d, stderr %q; want 2 and target unreachable", code, stderr.String())
	}
}

// TestFirstRequestRefused: when the plain request does not succeed (here:
// no credentials), nothing can be checked and the exit status is 2.
func TestFirstRequestRefused(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		http.Error(w, "who are you?", http.StatusUnauthorized)
	}))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	code := run([]string{"-url", srv.URL, "-d", "{}"}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "the first request got 401 who are you?") {
		t.Errorf("exit status %d, stderr %q; want 2 and the 401", code, stderr.String())
	}
	if n.Load() != 1 {
		t.Errorf("%d requests after the first failed, want 1", n.Load())
	}
}

// TestDryRun sends nothing.
func TestDryRun(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { n.Add(1) }))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	code := run([]string{"-url", srv.URL, "-d", `{"a":"{{unique}}"}`, "-dry-run"}, &stdout, &stderr)
	if code != 0 || n.Load() != 0 {
		t.Fatalf("exit status %d after %d requests, want 0 after none", code, n.Load())
	}
	for _, want := range []string{"at most 34 requests\n", "  tenant isolation     not run: needs -tenant2", "  reordered JSON       not run: needs a JSON object", "  missing key          at most 1 request\n"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("plan lacks %q:\n%s", want, stdout.String())
		}
	}
}

// TestJUnitCountsLikeExitStatus: a MUST failure is a JUnit <failure>; an
// unmet SHOULD or MAY case is not, unless -strict; a case that could not
// run is <skipped>.
func TestJUnitCountsLikeExitStatus(t *testing.T) {
	srv := handMadeServer(t, faults{noFingerprint: true})
	for _, strict := range []bool{false, true} {
		file := filepath.Join(t.TempDir(), "junit.xml")
		args := []string{"-url", srv.URL, "-d", `{"n":"{{unique}}","m":1}`, "-H", "Authorization: a", "-junit", file, "-json"}
		if strict {
			args = append(args, "-strict")
		}
		code, rep, _ := runJSON(t, args...)
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var ju junitSuites
		if err := xml.Unmarshal(b, &ju); err != nil {
			t.Fatal(err)
		}
		var counting, skipped int
		for _, r := range rep.Targets[0].Results {
			if r.Counts {
				counting++
			}
			if r.Status == "not run" {
				skipped++
			}
		}
		if code != 1 || ju.Failures != counting || ju.Skipped != skipped || ju.Tests != len(rules) {
			t.Errorf("strict=%v: exit %d, JUnit %d tests %d failures %d skipped; report: %d counting failures, %d not run",
				strict, code, ju.Tests, ju.Failures, ju.Skipped, counting, skipped)
		}
		if want := map[bool]int{false: 1, true: 2}[strict]; counting != want {
			// payload/changed (MUST), and with -strict payload/changed-422 (SHOULD)
			t.Errorf("strict=%v: %d counting failures, want %d%s", strict, counting, want, failures(rep))
		}
		if !strict && !bytes.Contains(b, []byte("not met (SHOULD, does not fail the run)")) {
			t.Errorf("the unmet SHOULD case is not reported in the JUnit file:\n%s", b)
		}
	}
}

func TestReorderJSON(t *testing.T) {
	in := []byte(`{"amount":100,"currency":"usd","meta":{"a":[1,2]},"note":"x\"y"}`)
	out, ok := reorderJSON(in)
	if !ok {
		t.Fatal("not reordered")
	}
	if bytes.Equal(in, out) || bytes.Index(out, []byte(`"note"`)) > bytes.Index(out, []byte(`"amount"`)) {
		t.Errorf("members not reordered: %s", out)
	}
	var a, b any
	if json.Unmarshal(in, &a) != nil || json.Unmarshal(out, &b) != nil || !reflect.DeepEqual(a, b) {
		t.Errorf("reordered %s is not the same JSON as %s", out, in)
	}
	for _, body := range []string{`{"only":1}`, `[1,2]`, `not json`, `{"a":1,"b":2} trailing`, ``} {
		if _, ok := reorderJSON([]byte(body)); ok {
			t.Errorf("%q was reordered; only objects with two members or more can be", body)
		}
	}
}

func TestVerdicts(t *testing.T) {
	v := newVerdicts()
	v.pass("replay/body", "ok")
	v.fail("replay/body", "differs")
	v.pass("replay/body", "ok again")
	if r := v.get("replay/body"); r.status != failed || r.detail != "differs" {
		t.Errorf("a pass after a failure changed it: %+v", r)
	}
	v.skip("replay/marker", "cannot tell")
	v.fail("replay/marker", "none")
	if r := v.get("replay/marker"); r.status != failed {
		t.Errorf("a failure after a skip was lost: %+v", r)
	}
	v.breach("key/escapes", "ran again")
	if r := v.get("key/escapes"); r.level != must || !r.counts(false) {
		t.Errorf("a breach is not a counting MUST failure: %+v", r)
	}
	v.fail("key/list", "accepted")
	if r := v.get("key/list"); r.counts(false) || !r.counts(true) {
		t.Errorf("a SHOULD failure counts without -strict, or not with it: %+v", r)
	}
	res := v.results()
	if len(res) != len(rules) || res[len(res)-1].status != notRun {
		t.Errorf("undecided rules are not reported as not run")
	}
}

func TestWithQuery(t *testing.T) {
	if got := withQuery("http://h/p", "a", "b c"); got != "http://h/p?a=b+c" {
		t.Error(got)
	}
	if got := withQuery("http://h/p?x=1", "a", "b"); got != "http://h/p?x=1&a=b" {
		t.Error(got)
	}
}

// Each rule belongs to exactly one probe, and each probe's rules exist.
func TestRulesAndProbes(t *testing.T) {
	owner := map[string]string{}
	for _, p := range probes {
		for _, id := range p.rules {
			if o, ok := owner[id]; ok {
				t.Errorf("%s decided by %s and %s", id, o, p.name)
			}
			owner[id] = p.name
		}
	}
	for _, r := range rules {
		if owner[r.id] == "" {
			t.Errorf("no probe decides %s", r.id)
		}
	}
	if len(owner) != len(rules) {
		t.Errorf("probes name %d rules, the table has %d", len(owner), len(rules))
	}
}

// TestOpenAPIDryRunMethods: with -openapi, -X given limits the operations;
// without it, POST and PATCH are both checked.
func TestOpenAPIDryRunMethods(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"POST http://127.0.0.1:1/v1/things", "PATCH http://127.0.0.1:1/v1/things/obj_0001"}},
		{[]string{"-X", "POST"}, []string{"POST http://127.0.0.1:1/v1/things"}},
		{[]string{"-X", "patch"}, []string{"PATCH http://127.0.0.1:1/v1/things/obj_0001"}},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"-url", "http://127.0.0.1:1", "-openapi", "testdata/openapi.yaml", "-dry-run"}, tt.args...)
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit status %d: %s", tt.args, code, stderr.String())
		}
		var got []string
		for _, line := range strings.Split(stdout.String(), "\n") {
			if strings.HasPrefix(line, "POST ") || strings.HasPrefix(line, "PATCH ") {
				name, _, _ := strings.Cut(line, ": at most")
				got = append(got, name)
			}
		}
		if strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("%v: checks %q, want %q", tt.args, got, tt.want)
		}
	}
}
