package examples_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

// Tables in the docs that restate the code are checked against it, so that
// neither can change without the other.

// tableColumn returns the first column of the markdown table that follows
// the line starting with after, each cell's backquoted name.
func tableColumn(t *testing.T, doc, after string) []string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", doc))
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	i := strings.Index(text, after)
	if i < 0 {
		t.Fatalf("%s: no %q", doc, after)
	}
	cell := regexp.MustCompile("^\\| `([^`]+)` \\|")
	var names []string
	inTable := false
	for _, line := range strings.Split(text[i:], "\n")[1:] {
		switch {
		case strings.HasPrefix(line, "|"):
			inTable = true
			if m := cell.FindStringSubmatch(line); m != nil {
				names = append(names, m[1])
			}
		case inTable:
			return names
		}
	}
	return names
}

func TestOperationsListsEveryEventKind(t *testing.T) {
	var kinds []string
	for _, k := range idemtest.EventKinds() {
		kinds = append(kinds, k.String())
	}
	if got := tableColumn(t, "operations.md", "The `idemkit.event` values"); !slices.Equal(got, kinds) {
		t.Errorf("operations.md outcomes %v\nthe Engine emits   %v", got, kinds)
	}
}

func TestOperationsListsEveryReason(t *testing.T) {
	var reasons []string
	for _, r := range idemtest.Reasons() {
		reasons = append(reasons, string(r))
	}
	if got := tableColumn(t, "operations.md", "`idemkit.reason` on `not-stored`"); !slices.Equal(got, reasons) {
		t.Errorf("operations.md reasons %v\nthe Engine uses   %v", got, reasons)
	}
}

func TestOperationsLogLevelsCoverEveryEventKind(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(src)
	table := text[strings.Index(text, "| level | events |"):]
	table = table[:strings.Index(table, "\n\n")]
	for _, k := range idemtest.EventKinds() {
		if !strings.Contains(table, "`"+k.String()+"`") {
			t.Errorf("operations.md's log level table does not say at which level %s is logged", k)
		}
	}
}

func TestProblemsDocumentEveryType(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "..", "core", "exchange", "response.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	ast.Inspect(f, func(n ast.Node) bool {
		if spec, ok := n.(*ast.ValueSpec); ok && len(spec.Names) == 1 && strings.HasPrefix(spec.Names[0].Name, "Problem") && len(spec.Values) == 1 {
			if lit, ok := spec.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING && spec.Names[0].Name != "ProblemContentType" {
				v, _ := strconv.Unquote(lit.Value)
				types = append(types, v)
			}
		}
		return true
	})
	src, err := os.ReadFile(filepath.Join("..", "problems.md"))
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^## (\S+)$`).FindAllStringSubmatch(string(src), -1) {
		documented = append(documented, m[1])
	}
	slices.Sort(types)
	slices.Sort(documented)
	if !slices.Equal(types, documented) || len(types) < 8 {
		t.Errorf("problems.md documents %v\ncore/exchange/response.go declares %v", documented, types)
	}
}

// The README's store table and the operations guide state the memory
// store's default bound and per-tenant share.
func TestDocsStateTheMemoryStoreDefault(t *testing.T) {
	n := thousands(memstore.DefaultMaxRecords)
	for doc, want := range map[string]string{
		"../README.md":  "bounded: " + n + " records by default",
		"operations.md": "(`WithMaxRecords`, " + n + " by default, and a tenth of",
	} {
		src, err := os.ReadFile(filepath.Join("..", doc))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(string(src)), " "), want) {
			t.Errorf("%s does not say %q", doc, want)
		}
	}
}
