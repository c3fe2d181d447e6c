package idem_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemtest"
)

// idemtest.Reasons and idemtest.EventKinds are what the tests of docs and
// metrics check their lists against: they must name every constant of
// their type, exchange.Reason (declared in exchange/lock.go) and
// idemevent.Kind (idemevent/event.go).
func TestEnumerationsAreComplete(t *testing.T) {
	parse := func(name string) *ast.File {
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	var reasons []exchange.Reason
	ast.Inspect(parse("exchange/lock.go"), func(n ast.Node) bool {
		if spec, ok := n.(*ast.ValueSpec); ok {
			if id, ok := spec.Type.(*ast.Ident); ok && id.Name == "Reason" {
				v, _ := strconv.Unquote(spec.Values[0].(*ast.BasicLit).Value)
				reasons = append(reasons, exchange.Reason(v))
			}
		}
		return true
	})
	// The kinds are the constants of the block whose first is of type Kind.
	kinds := 0
	ast.Inspect(parse("idemevent/event.go"), func(n ast.Node) bool {
		d, ok := n.(*ast.GenDecl)
		if !ok || d.Tok != token.CONST || len(d.Specs) == 0 {
			return true
		}
		if id, ok := d.Specs[0].(*ast.ValueSpec).Type.(*ast.Ident); ok && id.Name == "Kind" {
			for _, spec := range d.Specs {
				kinds += len(spec.(*ast.ValueSpec).Names)
			}
		}
		return false
	})
	if !slices.Equal(reasons, idemtest.Reasons()) {
		t.Errorf("idemtest.Reasons() = %v, event.go declares %v", idemtest.Reasons(), reasons)
	}
	if len(idemtest.EventKinds()) != kinds {
		t.Errorf("idemtest.EventKinds() has %d kinds, event.go declares %d", len(idemtest.EventKinds()), kinds)
	}
	for _, k := range idemtest.EventKinds() {
		if k.String() == "unknown" {
			t.Errorf("event kind %d has no name", k)
		}
	}
}
