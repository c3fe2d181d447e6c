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
// their type declared in event.go.
func TestEnumerationsAreComplete(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "event.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []exchange.Reason
	kinds := 0
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if id, ok := spec.Type.(*ast.Ident); ok && id.Name == "Reason" {
			v, _ := strconv.Unquote(spec.Values[0].(*ast.BasicLit).Value)
			reasons = append(reasons, exchange.Reason(v))
		}
		for _, name := range spec.Names {
			if len(name.Name) > 5 && name.Name[:5] == "Event" {
				kinds++
			}
		}
		return true
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
