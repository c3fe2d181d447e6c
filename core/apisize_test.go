package idem_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxExported is how many exported identifiers package idem may show: its
// functions, types, constants and variables, and their fields and methods
// (an interface's included). What only adapter or store authors use
// belongs in package exchange, and what only this repository uses in
// internal/, so that `go doc -all` of idem shows what a user needs.
const maxExported = 120

// TestExportedIdentifiers holds package idem to maxExported identifiers,
// counted as `go doc -all` lists them.
func TestExportedIdentifiers(t *testing.T) {
	names := exportedIdentifiers(t, ".")
	if len(names) > maxExported {
		t.Fatalf("package idem exports %d identifiers, at most %d: move what only adapters or stores use to package exchange\n%s",
			len(names), maxExported, strings.Join(names, "\n"))
	}
	t.Logf("package idem exports %d identifiers", len(names))
}

func exportedIdentifiers(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
	}
	d, err := doc.NewFromFiles(fset, files, "github.com/idemkit/idemkit/core")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			names = append(names, v.Names...)
		}
	}
	values(d.Consts)
	values(d.Vars)
	for _, f := range d.Funcs {
		names = append(names, f.Name)
	}
	for _, ty := range d.Types {
		names = append(names, ty.Name)
		values(ty.Consts)
		values(ty.Vars)
		for _, f := range ty.Funcs {
			names = append(names, f.Name)
		}
		for _, m := range ty.Methods {
			names = append(names, ty.Name+"."+m.Name)
		}
		switch st := ty.Decl.Specs[0].(*ast.TypeSpec).Type.(type) {
		case *ast.StructType:
			for _, f := range st.Fields.List {
				for _, n := range f.Names {
					if n.IsExported() {
						names = append(names, ty.Name+"."+n.Name)
					}
				}
				if len(f.Names) == 0 {
					names = append(names, ty.Name+" (embedded field)")
				}
			}
		case *ast.InterfaceType:
			for _, f := range st.Methods.List {
				for _, n := range f.Names {
					names = append(names, ty.Name+"."+n.Name)
				}
			}
		}
	}
	return names
}
