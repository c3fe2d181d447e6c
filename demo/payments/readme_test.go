package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// session is a curl command of a console block of the README and the
// lines the README shows it printing.
type session struct {
	line    int // of the command, in the README
	command string
	shown   []string
}

// readmeSessions returns the curl commands of the README's console blocks
// in order, a command continued over lines (a trailing backslash) joined.
// Other commands (go run, redis-cli) and comments ("$ # ...") are left
// out: the test runs one demo, on SQLite.
func readmeSessions(t *testing.T) []session {
	t.Helper()
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	var all []session
	var cur *session
	in := false
	lines := strings.Split(string(src), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "```console"):
			in, cur = true, nil
			continue
		case strings.HasPrefix(l, "```"):
			in, cur = false, nil
			continue
		case !in:
			continue
		}
		if cmd, ok := strings.CutPrefix(l, "$ "); ok {
			cur = nil
			if !strings.HasPrefix(cmd, "curl ") {
				continue
			}
			at := i + 1
			for strings.HasSuffix(cmd, `\`) && i+1 < len(lines) {
				i++
				cmd = strings.TrimSuffix(cmd, `\`) + " " + strings.TrimSpace(lines[i])
			}
			all = append(all, session{line: at, command: cmd})
			cur = &all[len(all)-1]
			continue
		}
		if cur != nil {
			cur.shown = append(cur.shown, l)
		}
	}
	return all
}

// TestREADMETranscripts replays the curl sessions of the README against
// the demo's command, run as the README says (SQLite, the defaults), in
// order, on one database: each line a session shows must be in what curl
// printed, in order ("…" stands for any text), except JSON, whose members
// must be those printed, in order, with the same values but for the
// settled side of a balance (the provider settles a charge about a second
// after it is made, so a balance read at once may not show it yet).
func TestREADMETranscripts(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed to replay the README's sessions (make test installs it)")
	}
	sessions := readmeSessions(t)
	balances := 0
	for _, s := range sessions {
		if strings.Contains(s.command, "/v1/balance") {
			balances++
		}
	}
	if len(sessions) < 5 || balances < 3 {
		t.Fatalf("found %d curl sessions, %d of the balance, in README.md", len(sessions), balances)
	}
	in := startInstance(t)
	host := strings.TrimPrefix(in.base, "http://")
	for _, s := range sessions {
		out, err := exec.Command("sh", "-c", strings.ReplaceAll(s.command, "localhost:8080", host)).Output()
		if err != nil {
			t.Fatalf("README.md:%d: %s: %v", s.line, s.command, err)
		}
		got := strings.Split(strings.ReplaceAll(string(out), "\r\n", "\n"), "\n")
		if !shownIn(t, s.shown, got) {
			t.Errorf("README.md:%d: %s\nshows:\n%s\nthe demo printed:\n%s", s.line, s.command, strings.Join(s.shown, "\n"), out)
		}
	}
}

// shownIn reports whether every line of shown matches a line of got, in
// order.
func shownIn(t *testing.T, shown, got []string) bool {
	t.Helper()
	j := 0
	for _, want := range shown {
		for ; j < len(got) && !lineMatches(t, want, got[j]); j++ {
		}
		if j == len(got) {
			return false
		}
		j++
	}
	return true
}

func lineMatches(t *testing.T, want, got string) bool {
	if strings.HasPrefix(want, "{") {
		return sameJSON(t, want, got)
	}
	parts := strings.Split(want, "…")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return regexp.MustCompile("^" + strings.Join(parts, ".*") + "$").MatchString(got)
}

// sameJSON reports whether the objects want and got have the same members
// in the same order, with the same values but for the settled side.
func sameJSON(t *testing.T, want, got string) bool {
	wk, wv := members(want)
	gk, gv := members(got)
	if wk == nil || strings.Join(wk, ",") != strings.Join(gk, ",") {
		return false
	}
	for i, k := range wk {
		if !strings.HasPrefix(k, "settle") && string(wv[i]) != string(gv[i]) {
			return false
		}
	}
	return true
}

// members returns the names and values of the members of a JSON object,
// in order, or nil if s is not one.
func members(s string) ([]string, []json.RawMessage) {
	dec := json.NewDecoder(strings.NewReader(s))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil
	}
	var keys []string
	var values []json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil
		}
		keys, values = append(keys, tok.(string)), append(values, v)
	}
	return keys, values
}
