package examples_test

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemclient"
	"github.com/idemkit/idemkit/core/memstore"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
)

// docs/options.md lists every setting with its type and default. Each of
// its tables follows a note naming what it restates:
//
//   - <!-- fields: DIR TYPE -->: the fields of struct TYPE of the package
//     in DIR, in order;
//   - <!-- options: DIR -->: the functions of the package in DIR that
//     return its Option, in any order.
//
// Other notes (a code block's) are left to docs_blocks_test.go.
//
// The type column is the Go type as declared (an option's parameter, or
// "none"), with the package's own names qualified by the package's name.

// optionsDoc is the reference page, from this module's directory.
const optionsDoc = "../options.md"

// optionRow is one row of a table of docs/options.md.
type optionRow struct{ name, typ, def string }

// optionTables returns the tables of docs/options.md by their notes.
func optionTables(t *testing.T) map[string][]optionRow {
	t.Helper()
	src, err := os.ReadFile(optionsDoc)
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `([^`]+)` \\| (?:`([^`]+)`|(none)) \\| ([^|]+) \\|")
	tables := map[string][]optionRow{}
	note := ""
	for _, line := range strings.Split(string(src), "\n") {
		if n, ok := strings.CutPrefix(line, "<!-- "); ok && strings.HasSuffix(n, " -->") {
			note = strings.TrimSuffix(n, " -->")
			if !strings.HasPrefix(note, "fields: ") && !strings.HasPrefix(note, "options: ") {
				note = "" // a code block's note, checked with every document's blocks
				continue
			}
			tables[note] = nil
			continue
		}
		if note == "" || !strings.HasPrefix(line, "| `") {
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("docs/options.md: a row of %q is not | `name` | `type` | default | meaning |: %s", note, line)
			continue
		}
		typ := m[2]
		if m[3] != "" {
			typ = m[3]
		}
		tables[note] = append(tables[note], optionRow{name: m[1], typ: typ, def: strings.TrimSpace(m[4])})
	}
	return tables
}

// parsePackage parses the non-test files of the package in dir, a
// directory of the repository, and returns them with the package's name.
func parsePackage(t *testing.T, dir string) ([]*ast.File, string) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(repoRoot, dir, "*.go"))
	var files []*ast.File
	name := ""
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		name = f.Name.Name
	}
	if len(files) == 0 {
		t.Fatalf("no Go package in %s", dir)
	}
	return files, name
}

// typeString prints a type expression of package pkg as a user of the
// package writes it: its own exported names qualified with pkg.
func typeString(t *testing.T, expr ast.Expr, pkg string) string {
	t.Helper()
	ast.Inspect(expr, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			return false // already qualified
		case *ast.Ident:
			if n.IsExported() {
				n.Name = pkg + "." + n.Name
			}
		}
		return true
	})
	var b bytes.Buffer
	if err := printer.Fprint(&b, token.NewFileSet(), expr); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// sourceFields returns the fields of struct typeName in dir, with their
// types, in order.
func sourceFields(t *testing.T, dir, typeName string) []optionRow {
	t.Helper()
	files, pkg := parsePackage(t, dir)
	var rows []optionRow
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			spec, ok := n.(*ast.TypeSpec)
			if !ok || spec.Name.Name != typeName {
				return true
			}
			for _, field := range spec.Type.(*ast.StructType).Fields.List {
				typ := typeString(t, field.Type, pkg)
				for _, name := range field.Names {
					rows = append(rows, optionRow{name: name.Name, typ: typ})
				}
			}
			return false
		})
	}
	if len(rows) == 0 {
		t.Fatalf("no struct %s in %s", typeName, dir)
	}
	return rows
}

// sourceOptions returns the functions of the package in dir that return
// its Option, each with its parameter's type ("none" without one).
func sourceOptions(t *testing.T, dir string) []optionRow {
	t.Helper()
	files, pkg := parsePackage(t, dir)
	var rows []optionRow
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fn.Type.Results.List[0].Type.(*ast.Ident); !ok || id.Name != "Option" {
				continue
			}
			typ := "none"
			switch params := fn.Type.Params.List; {
			case len(params) == 1 && len(params[0].Names) <= 1:
				typ = typeString(t, params[0].Type, pkg)
			case len(params) > 0:
				t.Fatalf("%s.%s takes several parameters: extend this test", pkg, fn.Name.Name)
			}
			rows = append(rows, optionRow{name: fn.Name.Name, typ: typ})
		}
	}
	return rows
}

// optionPackages returns the directories of the packages that declare an
// Option type: each has a table.
func optionPackages(t *testing.T) []string {
	t.Helper()
	var dirs []string
	decl := regexp.MustCompile(`(?m)^type Option func`)
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if decl.Match(src) {
			rel, _ := filepath.Rel(repoRoot, filepath.Dir(path))
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestOptionsReferenceMatchesTheCode checks every table of
// docs/options.md against the declarations it restates, and that every
// package with options and both Config types have a table.
func TestOptionsReferenceMatchesTheCode(t *testing.T) {
	tables := optionTables(t)
	want := []string{"fields: core Config", "fields: core/idemclient Config"}
	for _, dir := range optionPackages(t) {
		want = append(want, "options: "+dir)
	}
	if len(want) < 10 {
		t.Fatalf("found only %v", want)
	}
	for _, note := range want {
		if _, ok := tables[note]; !ok {
			t.Errorf("docs/options.md has no table noted <!-- %s -->", note)
		}
	}
	for note, rows := range tables {
		kind, what, _ := strings.Cut(note, ": ")
		var code []optionRow
		switch kind {
		case "fields":
			dir, typeName, _ := strings.Cut(what, " ")
			code = sourceFields(t, dir, typeName)
		case "options":
			code = sourceOptions(t, what)
			byName := func(a, b optionRow) int { return strings.Compare(a.name, b.name) }
			rows = slices.Clone(rows)
			slices.SortFunc(rows, byName)
			slices.SortFunc(code, byName)
		default:
			t.Errorf("docs/options.md: unknown note <!-- %s -->", note)
			continue
		}
		names := func(rs []optionRow) (out []string) {
			for _, r := range rs {
				out = append(out, r.name)
			}
			return out
		}
		if !slices.Equal(names(rows), names(code)) {
			t.Errorf("docs/options.md, %s:\nlists    %v\nthe code %v", note, names(rows), names(code))
			continue
		}
		for i := range rows {
			if rows[i].typ != code[i].typ {
				t.Errorf("docs/options.md, %s: %s has type %s, not %s", note, rows[i].name, code[i].typ, rows[i].typ)
			}
		}
	}
}

// TestOptionsReferenceDefaults checks the defaults of docs/options.md that
// the code names as constants.
func TestOptionsReferenceDefaults(t *testing.T) {
	tables := optionTables(t)
	redisPrefix := stringConst(t, "stores/redis", "DefaultPrefix")
	// The Engine's defaults, as New fills them in.
	def := idem.New(idem.Config{Store: memstore.New(memstore.WithPurgeInterval(0))}).Config()
	checks := map[string]map[string]string{
		"fields: core Config": {
			"HeaderName":      "`" + def.HeaderName + "`",
			"TTL":             human(def.TTL),
			"Lease":           human(def.Lease),
			"RetryAfter":      human(def.RetryAfter),
			"StoreTimeout":    human(def.StoreTimeout),
			"MaxRequestBody":  mib(int(def.MaxRequestBody)),
			"MaxResponseBody": mib(def.MaxResponseBody),
		},
		"fields: core/idemclient Config": {
			"HeaderName":  "`" + idem.DefaultHeaderName + "`",
			"MaxAttempts": strconv.Itoa(idemclient.DefaultMaxAttempts),
			"BaseBackoff": human(idemclient.DefaultBaseBackoff),
			"MaxBackoff":  human(idemclient.DefaultMaxBackoff),
			"Budget":      human(idemclient.DefaultBudget),
		},
		"options: core/memstore": {
			"WithMaxRecords":    thousands(memstore.DefaultMaxRecords),
			"WithPurgeInterval": human(memstore.DefaultPurgeInterval),
			"WithPurgeBatch":    strconv.Itoa(memstore.DefaultPurgeBatch),
		},
		"options: stores/gorm": {
			"WithTable":         "`" + gormstore.DefaultTable + "`",
			"WithPurgeInterval": human(gormstore.DefaultPurgeInterval),
			"WithPurgeBatch":    strconv.Itoa(gormstore.DefaultPurgeBatch),
			"WithCloseTimeout":  human(gormstore.DefaultCloseTimeout),
		},
		"options: stores/redis": {
			"WithPrefix": "`" + redisPrefix + "`",
		},
		"options: observability/otel": {
			"WithLease": human(def.Lease), // the Engine's, which idemotel's default must be
		},
	}
	for note, want := range checks {
		got := map[string]string{}
		for _, r := range tables[note] {
			got[r.name] = r.def
		}
		for name, def := range want {
			if got[name] != def {
				t.Errorf("docs/options.md, %s: %s defaults to %s in the code, the page says %q", note, name, def, got[name])
			}
		}
	}
}

// stringConst returns the value of a string constant of the package in dir.
func stringConst(t *testing.T, dir, name string) string {
	t.Helper()
	files, _ := parsePackage(t, dir)
	for _, f := range files {
		if obj := f.Scope.Lookup(name); obj != nil && obj.Kind == ast.Con {
			if lit, ok := obj.Decl.(*ast.ValueSpec).Values[0].(*ast.BasicLit); ok {
				v, err := strconv.Unquote(lit.Value)
				if err == nil {
					return v
				}
			}
		}
	}
	t.Fatalf("no string constant %s in %s", name, dir)
	return ""
}

// human writes a default duration the way the docs do: "100 ms", "30 s",
// "1 min", "24 h".
func human(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + " h"
	case d >= time.Minute && d%time.Minute == 0:
		return strconv.Itoa(int(d/time.Minute)) + " min"
	case d >= time.Second && d%time.Second == 0:
		return strconv.Itoa(int(d/time.Second)) + " s"
	default:
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + " ms"
	}
}

// mib writes a size in whole mebibytes: "1 MiB".
func mib(n int) string {
	if n%(1<<20) != 0 {
		return strconv.Itoa(n) + " bytes"
	}
	return strconv.Itoa(n>>20) + " MiB"
}

// thousands writes n with thousands separators: "1,000,000".
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
