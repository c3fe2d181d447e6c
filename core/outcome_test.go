package idem

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/core/exchange"
)

// TestFinished pins what each store answer makes of a Lock's end.
func TestFinished(t *testing.T) {
	down := errors.New("connection refused")
	rolled := errors.Join(ErrRolledBack, down)
	rolledLost := errors.Join(ErrRolledBack, ErrLockLost)
	for _, c := range []struct {
		name       string
		err        error
		reason     exchange.Reason
		completing bool
		want       exchange.Finished
		withhold   bool
	}{
		{"completed", nil, "", true, exchange.Finished{Outcome: exchange.Recorded}, false},
		{"completion failed", down, "", true, exchange.Finished{Outcome: exchange.NotRecorded, Reason: exchange.ReasonStore, Err: down}, false},
		{"completion refused", ErrLockLost, "", true, exchange.Finished{Outcome: exchange.LockLost, Reason: exchange.ReasonLockLost, Err: ErrLockLost}, true},
		{"commit failed", rolled, "", true, exchange.Finished{Outcome: exchange.RolledBack, Reason: exchange.ReasonStore, Err: rolled}, true},
		{"commit refused", rolledLost, "", true, exchange.Finished{Outcome: exchange.RolledBack, Reason: exchange.ReasonLockLost, Err: rolledLost}, true},
		{"released", nil, exchange.ReasonTooLarge, false, exchange.Finished{Outcome: exchange.NotRecorded, Reason: exchange.ReasonTooLarge, Err: nil}, false},
		{"release failed", down, exchange.ReasonTooLarge, false, exchange.Finished{Outcome: exchange.NotRecorded, Reason: exchange.ReasonTooLarge, Err: down}, false},
		{"release rolled back", rolled, exchange.ReasonTooLarge, false, exchange.Finished{Outcome: exchange.RolledBack, Reason: exchange.ReasonTooLarge, Err: rolled}, true},
		{"release of a failure rolled back", rolled, exchange.ReasonStatus, false, exchange.Finished{Outcome: exchange.RolledBack, Reason: exchange.ReasonStatus, Err: rolled}, false},
		{"release refused", ErrLockLost, exchange.ReasonStreamed, false, exchange.Finished{Outcome: exchange.LockLost, Reason: exchange.ReasonStreamed, Err: ErrLockLost}, true},
		{"release of a failure refused", ErrLockLost, exchange.ReasonStatus, false, exchange.Finished{Outcome: exchange.LockLost, Reason: exchange.ReasonStatus, Err: ErrLockLost}, false},
	} {
		got := finished(c.err, c.reason, c.completing)
		if got != c.want || got.Withhold() != c.withhold {
			t.Errorf("%s: %+v (withhold %v), want %+v (withhold %v)", c.name, got, got.Withhold(), c.want, c.withhold)
		}
	}
}

// TestPolicyOutcomeTable checks docs/policy.md's table of what each entry
// point does with an outcome against exchange.Outcome and Withhold: a row per
// outcome, named as exchange.Outcome.String names it; "withheld" for HTTP and gRPC
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
	doErr := map[exchange.Outcome]string{exchange.NotRecorded: "`ErrNotRecorded`", exchange.RolledBack: "`ErrRolledBack`", exchange.LockLost: "`ErrLockLost`"}
	seen := map[exchange.Outcome]int{}
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
		var o exchange.Outcome
		for c := exchange.Recorded; c <= exchange.LockLost; c++ {
			if strings.HasPrefix(strings.TrimSpace(cells[0]), "`"+c.String()+"`") {
				o = c
			}
		}
		if o == 0 {
			t.Fatalf("row %q names no outcome", line)
		}
		seen[o]++
		failure := strings.Contains(cells[0], "never recorded") || strings.Contains(cells[0], "failed job")
		reason := exchange.ReasonTooLarge
		if failure {
			reason = exchange.ReasonStatus
		}
		withhold := exchange.Finished{Outcome: o, Reason: reason}.Withhold()
		for _, cell := range cells[1:3] {
			if strings.Contains(cell, "withheld") != withhold {
				t.Errorf("row %q: %q, but Withhold is %v", cells[0], cell, withhold)
			}
		}
		switch want := doErr[o]; {
		case o == exchange.Recorded && !strings.Contains(cells[3], "no error"):
			t.Errorf("row %q: Do %q, want no error", cells[0], cells[3])
		case o != exchange.Recorded && !failure && !strings.Contains(cells[3], want):
			t.Errorf("row %q: Do %q, want %s", cells[0], cells[3], want)
		}
	}
	for o := exchange.Recorded; o <= exchange.LockLost; o++ {
		if seen[o] == 0 {
			t.Errorf("the table has no row for %s", o)
		}
	}
}
