package examples_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
	idemotel "github.com/idemkit/idemkit/observability/otel"
)

// operations.md lists every metric idemotel exports, and alerts built on
// them. Both are checked here against what the code exports once every
// kind of event, every reason and every store call has been seen: the
// OpenTelemetry instruments as an SDK reader collects them, and the
// Prometheus families as NewPrometheus serves them.

// exported is what idemotel exports, with every option.
type exported struct {
	otel map[string]instrument          // by OpenTelemetry name
	prom map[string]*dto.MetricFamily   // by Prometheus family name
	vals map[string]map[string][]string // family -> label -> values seen
	le   map[string][]float64           // histogram family -> bucket bounds
}

type instrument struct {
	typ, unit string
	attrs     []string
}

func exportAll(t *testing.T) exported {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	prom, err := idemotel.NewPrometheus(sdkmetric.WithReader(reader))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prom.Shutdown(context.Background()) })
	store := memstore.New(memstore.WithPurgeInterval(0))
	t.Cleanup(func() { store.Close() })
	m, err := idemotel.New(idemotel.WithMeterProvider(prom.MeterProvider), idemotel.WithMemoryStore(store),
		idemotel.WithRouteMapper(func(string) string { return "/v1/charges" }))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Purge(context.Background(), time.Now(), 10); err != nil {
		t.Fatal(err)
	}
	down := errors.New("connection refused")
	ctx := context.Background()
	for _, k := range idemtest.EventKinds() {
		ev := idemevent.Event{Kind: k, Method: "POST", Route: "/v1/charges/ch_1", Duration: time.Second, StoreLatency: time.Millisecond}
		switch k {
		case idemevent.KeyMissing, idemevent.KeyInvalid, idemevent.TooLarge, idemevent.BodyUnreadable, idemevent.LeaseLost:
		case idemevent.Stored:
			ev.StoreCall = "complete"
		case idemevent.Renewed, idemevent.RenewError:
			ev.StoreCall = "renew"
		default:
			ev.StoreCall = "acquire"
		}
		if k == idemevent.StoreError || k == idemevent.Unprotected || k == idemevent.RenewError {
			ev.Err = down
		}
		if k != idemevent.NotStored {
			m.OnEvent(ctx, ev)
			continue
		}
		for _, r := range idemtest.Reasons() {
			ev.Reason, ev.StoreCall, ev.Err = r, "release", nil
			if r == exchange.ReasonStore {
				ev.StoreCall, ev.Err = "complete", down
			}
			m.OnEvent(ctx, ev)
		}
	}

	out := exported{otel: map[string]instrument{}, prom: map[string]*dto.MetricFamily{},
		vals: map[string]map[string][]string{}, le: map[string][]float64{}}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			in := instrument{unit: md.Unit}
			keys := map[string]bool{}
			addKeys := func(kvs []string) {
				for _, k := range kvs {
					keys[k] = true
				}
			}
			switch d := md.Data.(type) {
			case metricdata.Sum[int64]:
				in.typ = sumType(d.IsMonotonic)
				for _, dp := range d.DataPoints {
					addKeys(attrKeys(dp.Attributes.ToSlice()))
				}
			case metricdata.Sum[float64]:
				in.typ = sumType(d.IsMonotonic)
				for _, dp := range d.DataPoints {
					addKeys(attrKeys(dp.Attributes.ToSlice()))
				}
			case metricdata.Histogram[float64]:
				in.typ = "histogram"
				for _, dp := range d.DataPoints {
					addKeys(attrKeys(dp.Attributes.ToSlice()))
				}
			case metricdata.Gauge[int64]:
				in.typ = "gauge"
				for _, dp := range d.DataPoints {
					addKeys(attrKeys(dp.Attributes.ToSlice()))
				}
			default:
				t.Fatalf("%s: aggregation %T", md.Name, md.Data)
			}
			for k := range keys {
				in.attrs = append(in.attrs, k)
			}
			slices.Sort(in.attrs)
			out.otel[md.Name] = in
		}
	}
	fams, err := prom.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		out.prom[f.GetName()] = f
		vals := map[string][]string{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(vals[l.GetName()], l.GetValue()) {
					vals[l.GetName()] = append(vals[l.GetName()], l.GetValue())
				}
			}
			if h := m.GetHistogram(); h != nil && out.le[f.GetName()] == nil {
				for _, b := range h.GetBucket() {
					out.le[f.GetName()] = append(out.le[f.GetName()], b.GetUpperBound())
				}
			}
		}
		out.vals[f.GetName()] = vals
	}
	return out
}

func sumType(monotonic bool) string {
	if monotonic {
		return "counter"
	}
	return "up-down counter"
}

func attrKeys(kvs []attribute.KeyValue) []string {
	var keys []string
	for _, kv := range kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

// promName is the name of an attribute as a Prometheus label.
func promName(attr string) string { return strings.ReplaceAll(attr, ".", "_") }

// promType is the Prometheus type of an OpenTelemetry instrument type.
var promType = map[string]dto.MetricType{
	"counter": dto.MetricType_COUNTER, "up-down counter": dto.MetricType_GAUGE,
	"gauge": dto.MetricType_GAUGE, "histogram": dto.MetricType_HISTOGRAM,
}

// metricRow is a row of operations.md's table of metrics.
type metricRow struct {
	prom, otel, typ, unit string
	attrs                 []string
}

var (
	backquoted    = regexp.MustCompile("`([^`]+)`")
	parenthesised = regexp.MustCompile(`\([^)]*\)`)
)

func metricsTable(t *testing.T) []metricRow {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	const header = "| metric | instrument | type | unit | attributes | meaning |"
	text := string(src)
	i := strings.Index(text, header)
	if i < 0 {
		t.Fatalf("operations.md has no table beginning %q", header)
	}
	var rows []metricRow
	for _, line := range strings.Split(text[i:], "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 6 {
			t.Fatalf("operations.md: a row of the metrics table has %d cells: %s", len(cells), line)
		}
		cell := func(i int) string { return strings.Trim(strings.TrimSpace(cells[i]), "`") }
		r := metricRow{prom: cell(0), otel: cell(1), typ: cell(2), unit: cell(3)}
		// Backquoted names outside brackets: "`idemkit.reason` (on `not-stored` only)".
		for _, m := range backquoted.FindAllStringSubmatch(parenthesised.ReplaceAllString(cells[4], ""), -1) {
			r.attrs = append(r.attrs, m[1])
		}
		slices.Sort(r.attrs)
		rows = append(rows, r)
	}
	return rows
}

// TestOperationsListsEveryMetric: the table of operations.md names every
// instrument, with its type, unit and attributes, and the Prometheus
// family it becomes, with its labels.
func TestOperationsListsEveryMetric(t *testing.T) {
	ex := exportAll(t)
	rows := metricsTable(t)
	var listed []string
	for _, r := range rows {
		listed = append(listed, r.otel)
		in, ok := ex.otel[r.otel]
		if !ok {
			t.Errorf("operations.md lists %s, which idemotel does not export", r.otel)
			continue
		}
		if in.typ != r.typ || in.unit != r.unit || !slices.Equal(in.attrs, r.attrs) {
			t.Errorf("operations.md: %s is a %s in %q with %v; the code makes a %s in %q with %v",
				r.otel, r.typ, r.unit, r.attrs, in.typ, in.unit, in.attrs)
		}
		f, ok := ex.prom[r.prom]
		if !ok {
			t.Errorf("operations.md: %s is not exposed to Prometheus as %s", r.otel, r.prom)
			continue
		}
		if f.GetType() != promType[r.typ] {
			t.Errorf("%s: Prometheus type %v, want %v for a %s", r.prom, f.GetType(), promType[r.typ], r.typ)
		}
		var labels, want []string
		for l := range ex.vals[r.prom] {
			labels = append(labels, l)
		}
		for _, a := range r.attrs {
			want = append(want, promName(a))
		}
		slices.Sort(labels)
		slices.Sort(want)
		if !slices.Equal(labels, want) {
			t.Errorf("%s: labels %v, operations.md says %v", r.prom, labels, want)
		}
	}
	for name := range ex.otel {
		if !slices.Contains(listed, name) {
			t.Errorf("idemotel exports %s, which operations.md does not list", name)
		}
	}
	if len(rows) < 11 {
		t.Errorf("the table has %d rows", len(rows))
	}
}

// series resolves a name used in a query (a family, or a histogram's
// _bucket, _sum or _count) to its family, and reports whether it names
// the buckets.
func (ex exported) series(name string) (family string, buckets, ok bool) {
	if _, ok := ex.prom[name]; ok {
		return name, false, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(name, suffix)
		if f, ok := ex.prom[base]; found && ok && f.GetType() == dto.MetricType_HISTOGRAM {
			return base, suffix == "_bucket", true
		}
	}
	return "", false, false
}

var promqlBlock = regexp.MustCompile("(?s)```promql\n(.*?)```")

// TestOperationsAlertsUseWhatIsExported: each query of operations.md names
// metrics, labels and label values that the code exports, or series that
// the recording rules of observability/prometheus make of them (a value
// that matches nothing would keep an alert silent for ever).
func TestOperationsAlertsUseWhatIsExported(t *testing.T) {
	cat := rulesCatalog(t)
	src, err := os.ReadFile(filepath.Join("..", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := promqlBlock.FindAllStringSubmatch(string(src), -1)
	if len(blocks) < 10 {
		t.Fatalf("operations.md has %d promql blocks", len(blocks))
	}
	for _, b := range blocks {
		for _, p := range cat.check(b[1]) {
			t.Errorf("operations.md: %q: %s", strings.TrimSpace(b[1]), p)
		}
	}
}

// TestMetricNamesInTheDocsAreExported: every idemkit_ name the operations
// page, idemotel's README and package doc and the rules' README mention is
// a family, a histogram's series or a label the code exports, or, written
// level:metric:operations, a series the recording rules make.
func TestMetricNamesInTheDocsAreExported(t *testing.T) {
	ex := exportAll(t)
	recorded := map[string]bool{}
	for _, r := range loadRules(t).rules() {
		recorded[r.Record] = r.Record != ""
	}
	labels := map[string]bool{}
	for _, vals := range ex.vals {
		for l := range vals {
			labels[l] = true
		}
	}
	word := regexp.MustCompile(`[A-Za-z0-9_:]*idemkit_[A-Za-z0-9_:]*`)
	for _, doc := range []string{"docs/operations.md", "observability/otel/README.md", "observability/otel/doc.go",
		"observability/prometheus/README.md"} {
		src, err := os.ReadFile(filepath.Join(repoRoot, doc))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range word.FindAllString(string(src), -1) {
			if strings.Contains(n, ":") {
				if !recorded[n] {
					t.Errorf("%s mentions %s, which no recording rule of rules.yml records", doc, n)
				}
				continue
			}
			if _, _, ok := ex.series(n); !ok && !labels[n] {
				t.Errorf("%s mentions %s, which is neither a metric nor a label the code exports", doc, n)
			}
		}
	}
}

// TestOperationsNamesEachEventsCounter: the table of event kinds says
// which counter counts each, as the code does.
func TestOperationsNamesEachEventsCounter(t *testing.T) {
	ex := exportAll(t)
	src, err := os.ReadFile(filepath.Join("..", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\| `(idemkit_[a-z_]+)` \\|")
	rows := row.FindAllStringSubmatch(string(src), -1)
	if len(rows) != len(idemtest.EventKinds()) {
		t.Fatalf("operations.md names the counter of %d event kinds; there are %d", len(rows), len(idemtest.EventKinds()))
	}
	for _, r := range rows {
		if !slices.Contains(ex.vals[r[2]]["idemkit_event"], r[1]) {
			t.Errorf("operations.md counts %s in %s; the code does not", r[1], r[2])
		}
	}
}
