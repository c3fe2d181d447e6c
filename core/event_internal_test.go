package idem

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"
)

// Reasons and EventKinds are what docs and metrics list: they must name
// every constant of their type declared in event.go.
func TestEnumerationsAreComplete(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "event.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []Reason
	kinds := 0
	ast.Inspect(f, func(n ast.Node) bool {
		spec, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		if id, ok := spec.Type.(*ast.Ident); ok && id.Name == "Reason" {
			v, _ := strconv.Unquote(spec.Values[0].(*ast.BasicLit).Value)
			reasons = append(reasons, Reason(v))
		}
		for _, name := range spec.Names {
			if len(name.Name) > 5 && name.Name[:5] == "Event" {
				kinds++
			}
		}
		return true
	})
	if !slices.Equal(reasons, Reasons()) {
		t.Errorf("Reasons() = %v, event.go declares %v", Reasons(), reasons)
	}
	if len(EventKinds()) != kinds {
		t.Errorf("EventKinds() has %d kinds, event.go declares %d", len(EventKinds()), kinds)
	}
	for _, k := range EventKinds() {
		if k.String() == "unknown" {
			t.Errorf("event kind %d has no name", k)
		}
	}
}
