package main

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// casesDoc is the page that publishes the cases, their levels and the
// draft's sentences they rest on.
const casesDoc = "../../docs/idemcheck.md"

// docRow is one row of the page's table of cases.
type docRow struct{ id, level, section, draft string }

// casesTable reads the table whose header starts with "| case | level |".
func casesTable(t *testing.T) []docRow {
	t.Helper()
	f, err := os.Open(casesDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []docRow
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "| case | level | section | the draft |"):
			in = true
			continue
		case !in:
			continue
		case !strings.HasPrefix(line, "|"):
			return rows
		case strings.HasPrefix(line, "| ---"):
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 5 {
			t.Fatalf("%s: a row of %d cells, want 5: %s", casesDoc, len(cells), line)
		}
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows = append(rows, docRow{strings.Trim(cells[0], "`"), cells[1], cells[2], cells[3]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestCasesTable: the published table has the code's cases, in report
// order, with the code's levels and sections, and says for each what the
// draft says. A MUST rests on the draft's own MUST or on idemcheck's floor,
// and the row says which.
func TestCasesTable(t *testing.T) {
	rows := casesTable(t)
	if len(rows) != len(rules) {
		t.Errorf("%s lists %d cases, the code has %d", casesDoc, len(rows), len(rules))
	}
	for i, ru := range rules {
		if i >= len(rows) {
			t.Errorf("%s: %s is missing", casesDoc, ru.id)
			continue
		}
		row := rows[i]
		if row.id != ru.id || row.level != ru.level.String() || row.section != ru.section {
			t.Errorf("%s row %d: %s %s %q; the code has %s %s %q", casesDoc, i+1, row.id, row.level, row.section, ru.id, ru.level, ru.section)
		}
		if row.draft == "" {
			t.Errorf("%s: %s does not say what the draft says", casesDoc, row.id)
		}
		if ru.level == must && !strings.Contains(row.draft, "floor") && !strings.Contains(row.draft, " must ") {
			t.Errorf("%s: %s is MUST, but its row cites neither a MUST of the draft nor idemcheck's floor: %s", casesDoc, row.id, row.draft)
		}
	}
}
