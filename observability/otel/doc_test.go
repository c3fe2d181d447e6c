package idemotel

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

// The package doc lists the outcome and reason values the Engine emits;
// this keeps the list from drifting from the code.
func TestDocListsEveryOutcomeAndReason(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(strings.ReplaceAll(string(src), "//", "")), " ")
	list := func(label string) []string {
		m := regexp.MustCompile(label + ` \(([^)]*)\)`).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("doc.go has no %q list", label)
		}
		return strings.Split(strings.ReplaceAll(m[1], " ", ""), ",")
	}
	var kinds, reasons []string
	for _, k := range idemtest.EventKinds() {
		kinds = append(kinds, k.String())
	}
	for _, r := range idemtest.Reasons() {
		reasons = append(reasons, string(r))
	}
	if got := list("idemkit.event is the event kind"); strings.Join(got, ",") != strings.Join(kinds, ",") {
		t.Errorf("doc.go outcomes %v, the Engine emits %v", got, kinds)
	}
	if got := list("idemkit.reason is set on not-stored only"); strings.Join(got, ",") != strings.Join(reasons, ",") {
		t.Errorf("doc.go reasons %v, the Engine uses %v", got, reasons)
	}
}

// The *Name constants are exactly the instruments New creates, with every
// option, once every kind of event has been seen.
func TestNameConstantsAreTheInstruments(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "metrics.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	ast.Inspect(f, func(n ast.Node) bool {
		if spec, ok := n.(*ast.ValueSpec); ok && len(spec.Names) == 1 && strings.HasSuffix(spec.Names[0].Name, "Name") &&
			spec.Names[0].Name != "ScopeName" {
			v, _ := strconv.Unquote(spec.Values[0].(*ast.BasicLit).Value)
			declared = append(declared, v)
		}
		return true
	})
	store := memstore.New(memstore.WithPurgeInterval(0))
	defer store.Close()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	m, err := New(WithMeterProvider(mp), WithMemoryStore(store))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range idemtest.EventKinds() {
		m.OnEvent(context.Background(), idemevent.Event{Kind: k, StoreCall: "acquire"})
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var created []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			created = append(created, m.Name)
		}
	}
	slices.Sort(declared)
	slices.Sort(created)
	if !slices.Equal(declared, created) {
		t.Errorf("metrics.go names %v\nNew creates %v", declared, created)
	}
}

// The handler duration's buckets reach the Engine's default lease unless
// WithLease says otherwise.
func TestDefaultLeaseIsTheEngines(t *testing.T) {
	store := memstore.New(memstore.WithPurgeInterval(0))
	defer store.Close()
	if got := idem.New(idem.Config{Store: store}).Config().Lease; got != defaultLease {
		t.Errorf("the Engine's default lease is %v, idemotel assumes %v", got, defaultLease)
	}
}
