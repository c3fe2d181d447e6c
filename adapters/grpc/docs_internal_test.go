package idemgrpc

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// The documents whose tables restate the interceptor's status codes:
// this module's README and the published policy.
var statusDocs = []string{"README.md", "../../docs/policy.md"}

// docTable returns the rows of the table that follows the note
// <!-- name --> in doc, each as its trimmed cells, header and rule left
// out.
func docTable(t *testing.T, doc, name string) [][]string {
	t.Helper()
	src, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(src), "<!-- "+name+" -->\n")
	if !ok {
		t.Fatalf("%s has no table noted <!-- %s -->", doc, name)
	}
	var rows [][]string
	for i, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if i < 2 {
			continue // the header and the rule under it
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: the table noted <!-- %s --> has no rows", doc, name)
	}
	return rows
}

var backticked = regexp.MustCompile("`([A-Z_]+)`")

// docCodes returns the codes a cell names, as `UPPER_CASE` names.
func docCodes(t *testing.T, doc, cell string) []codes.Code {
	t.Helper()
	var cs []codes.Code
	for _, m := range backticked.FindAllStringSubmatch(cell, -1) {
		var c codes.Code
		if err := c.UnmarshalJSON([]byte(`"` + m[1] + `"`)); err != nil {
			t.Errorf("%s: %s is no gRPC code: %v", doc, m[1], err)
			continue
		}
		cs = append(cs, c)
	}
	return cs
}

// TestDocsRefusals checks the table of the policy's outcomes as gRPC codes
// against refusals, which the interceptor answers with.
func TestDocsRefusals(t *testing.T) {
	for _, doc := range statusDocs {
		rows := docTable(t, doc, "grpc-refusals")
		if len(rows) != len(refusals) {
			t.Errorf("%s: %d rows, but the interceptor has %d refusals", doc, len(rows), len(refusals))
		}
		for _, r := range refusals {
			reason := "`" + errorReason(r.problem) + "`"
			i := slices.IndexFunc(rows, func(row []string) bool { return len(row) == 4 && row[2] == reason })
			if i < 0 {
				t.Errorf("%s: no row for %s", doc, reason)
				continue
			}
			row := rows[i]
			if cs := docCodes(t, doc, row[1]); len(cs) != 1 || cs[0] != r.code {
				t.Errorf("%s, %s: the table says %s, the code answers %v", doc, reason, row[1], r.code)
			}
			retry := strings.HasPrefix(row[3], "`RetryInfo`")
			if retry != r.retry || !retry && !strings.HasPrefix(row[3], "never") {
				t.Errorf("%s, %s: the table says %q about retrying; the refusal carries RetryInfo: %v", doc, reason, row[3], r.retry)
			}
		}
	}
}

// TestDocsRecordedCodes checks the table of recorded codes against
// Recorded.
func TestDocsRecordedCodes(t *testing.T) {
	var recorded, released []codes.Code
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c == codes.OK || Recorded(c) {
			recorded = append(recorded, c)
		} else {
			released = append(released, c)
		}
	}
	for _, doc := range statusDocs {
		rows := docTable(t, doc, "grpc-recorded")
		if len(rows) != 1 || len(rows[0]) != 2 {
			t.Fatalf("%s: want one row of two cells, got %q", doc, rows)
		}
		sorted := func(cs []codes.Code) []codes.Code { return slices.Sorted(slices.Values(cs)) }
		if got := sorted(docCodes(t, doc, rows[0][0])); !slices.Equal(got, recorded) {
			t.Errorf("%s lists as recorded %v; the code records %v", doc, got, recorded)
		}
		if got := sorted(docCodes(t, doc, rows[0][1])); !slices.Equal(got, released) {
			t.Errorf("%s lists as not recorded %v; the code releases the key for %v", doc, got, released)
		}
	}
}

// TestDocsOtherAnswers checks the table of the interceptor's answers that
// are no problem of the Engine's against the reasons and codes it sends.
func TestDocsOtherAnswers(t *testing.T) {
	want := map[string]codes.Code{reasonHandlerTimeout: codes.Unavailable, reasonLeaseLost: codes.Unavailable,
		reasonKeyNotAccepted: codes.FailedPrecondition}
	for _, doc := range statusDocs {
		rows := docTable(t, doc, "grpc-other-answers")
		if len(rows) != len(want) {
			t.Errorf("%s: %d rows, want %d", doc, len(rows), len(want))
		}
		for _, row := range rows {
			reason := strings.Trim(row[2], "`")
			code, ok := want[reason]
			if !ok {
				t.Errorf("%s: no answer has the reason %s", doc, row[2])
				continue
			}
			if cs := docCodes(t, doc, row[1]); len(cs) != 1 || cs[0] != code {
				t.Errorf("%s, %s: the table says %s, the code answers %v", doc, reason, row[1], code)
			}
			if retry := strings.HasPrefix(row[3], "`RetryInfo`"); retry != (code == codes.Unavailable) {
				t.Errorf("%s, %s: the table says %q about retrying", doc, reason, row[3])
			}
		}
	}
}

// TestDocsExcerpts checks that every Go block of the README noted
// <!-- excerpt: FILE --> is a run of lines of FILE, a file of this
// module whose examples are compiled and run, as it is there (each line
// of FILE taken without its first tab, as in a function's body).
func TestDocsExcerpts(t *testing.T) {
	src, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	const note = "<!-- excerpt: "
	rest, n := string(src), 0
	for {
		_, after, ok := strings.Cut(rest, note)
		if !ok {
			break
		}
		name, after, _ := strings.Cut(after, " -->\n")
		block, ok := strings.CutPrefix(after, "```go\n")
		if !ok {
			t.Fatalf("README.md: the note for %s is not followed by a Go block", name)
		}
		block, rest, ok = strings.Cut(block, "```\n")
		if !ok {
			t.Fatalf("README.md: the Go block from %s does not end", name)
		}
		code, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("README.md quotes %s: %v", name, err)
		}
		lines := strings.Split(string(code), "\n")
		for i, l := range lines {
			lines[i] = strings.TrimPrefix(l, "\t")
		}
		if !strings.Contains(strings.Join(lines, "\n"), block) {
			t.Errorf("README.md: this block is not in %s as it is there:\n%s", name, block)
		}
		n++
	}
	if n == 0 {
		t.Fatalf("README.md has no block noted %sFILE -->", note)
	}
}
