package idem

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestFinished pins what each store answer makes of a Lock's end.
func TestFinished(t *testing.T) {
	down := errors.New("connection refused")
	rolled := errors.Join(ErrRolledBack, down)
	rolledLost := errors.Join(ErrRolledBack, ErrLockLost)
	for _, c := range []struct {
		name       string
		err        error
		reason     Reason
		completing bool
		want       Finished
		withhold   bool
	}{
		{"completed", nil, "", true, Finished{Outcome: Recorded}, false},
		{"completion failed", down, "", true, Finished{NotRecorded, ReasonStore, down}, false},
		{"completion refused", ErrLockLost, "", true, Finished{LockLost, ReasonLockLost, ErrLockLost}, true},
		{"commit failed", rolled, "", true, Finished{RolledBack, ReasonStore, rolled}, true},
		{"commit refused", rolledLost, "", true, Finished{RolledBack, ReasonLockLost, rolledLost}, true},
		{"released", nil, ReasonTooLarge, false, Finished{NotRecorded, ReasonTooLarge, nil}, false},
		{"release failed", down, ReasonTooLarge, false, Finished{NotRecorded, ReasonTooLarge, down}, false},
		{"release rolled back", rolled, ReasonTooLarge, false, Finished{RolledBack, ReasonTooLarge, rolled}, true},
		{"release of a failure rolled back", rolled, ReasonStatus, false, Finished{RolledBack, ReasonStatus, rolled}, false},
		{"release refused", ErrLockLost, ReasonStreamed, false, Finished{LockLost, ReasonStreamed, ErrLockLost}, true},
		{"release of a failure refused", ErrLockLost, ReasonStatus, false, Finished{LockLost, ReasonStatus, ErrLockLost}, false},
	} {
		got := finished(c.err, c.reason, c.completing)
		if got != c.want || got.Withhold() != c.withhold {
			t.Errorf("%s: %+v (withhold %v), want %+v (withhold %v)", c.name, got, got.Withhold(), c.want, c.withhold)
		}
	}
}

// TestPolicyOutcomeTable checks docs/policy.md's table of what each entry
// point does with an outcome against Outcome and Withhold: a row per
// outcome, named as Outcome.String names it; "withheld" for HTTP and gRPC
// exactly where Withhold says so; and the error Do returns.
func TestPolicyOutcomeTable(t *testing.T) {
	src, err := os.ReadFile("../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(src), "<!-- entry-point-outcomes -->\n")
	if !ok {
		t.Fatal("docs/policy.md has no table noted <!-- entry-point-outcomes -->")
	}
	doErr := map[Outcome]string{NotRecorded: "`ErrNotRecorded`", RolledBack: "`ErrRolledBack`", LockLost: "`ErrLockLost`"}
	seen := map[Outcome]int{}
	for i, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if i < 2 {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			t.Fatalf("row %q: %d cells, want 4", line, len(cells))
		}
		var o Outcome
		for c := Recorded; c <= LockLost; c++ {
			if strings.HasPrefix(strings.TrimSpace(cells[0]), "`"+c.String()+"`") {
				o = c
			}
		}
		if o == 0 {
			t.Fatalf("row %q names no outcome", line)
		}
		seen[o]++
		failure := strings.Contains(cells[0], "never recorded") || strings.Contains(cells[0], "failed job")
		reason := ReasonTooLarge
		if failure {
			reason = ReasonStatus
		}
		withhold := Finished{Outcome: o, Reason: reason}.Withhold()
		for _, cell := range cells[1:3] {
			if strings.Contains(cell, "withheld") != withhold {
				t.Errorf("row %q: %q, but Withhold is %v", cells[0], cell, withhold)
			}
		}
		switch want := doErr[o]; {
		case o == Recorded && !strings.Contains(cells[3], "no error"):
			t.Errorf("row %q: Do %q, want no error", cells[0], cells[3])
		case o != Recorded && !failure && !strings.Contains(cells[3], want):
			t.Errorf("row %q: Do %q, want %s", cells[0], cells[3], want)
		}
	}
	for o := Recorded; o <= LockLost; o++ {
		if seen[o] == 0 {
			t.Errorf("the table has no row for %s", o)
		}
	}
}
