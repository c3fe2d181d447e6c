package idemotel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
	idemotel "github.com/idemkit/idemkit/observability/otel"
)

func newManual(t *testing.T, opts ...idemotel.Option) (*idemotel.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	m, err := idemotel.New(append(opts, idemotel.WithMeterProvider(mp))...)
	if err != nil {
		t.Fatal(err)
	}
	return m, reader
}

func collect(t *testing.T, r *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != idemotel.ScopeName {
			t.Errorf("scope %q, want %q", sm.Scope.Name, idemotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// sums maps each data point's attribute set, rendered, to its value.
func sums(t *testing.T, data metricdata.Aggregation) map[string]int64 {
	t.Helper()
	s, ok := data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("aggregation %T, want an int64 sum", data)
	}
	out := map[string]int64{}
	for _, dp := range s.DataPoints {
		out[render(dp.Attributes)] += dp.Value
	}
	return out
}

// counted is sums without the series at zero: every counter's series
// starts at zero (see TestSeriesStartAtZero), and these tests look at
// what was counted.
func counted(t *testing.T, data metricdata.Aggregation) map[string]int64 {
	t.Helper()
	out := sums(t, data)
	for k, v := range out {
		if v == 0 {
			delete(out, k)
		}
	}
	return out
}

func render(s attribute.Set) string {
	var out string
	for _, kv := range s.ToSlice() {
		out += string(kv.Key) + "=" + kv.Value.String() + ";"
	}
	return out
}

func TestOnEventAttributes(t *testing.T) {
	ms := time.Millisecond
	script := []idemevent.Event{
		{Kind: idemevent.First, Method: "POST", Route: "/v1/charges", StoreCall: "acquire", StoreLatency: 2 * ms},
		{Kind: idemevent.Stored, Method: "POST", Route: "/v1/charges", Status: 201, StoreCall: "complete", StoreLatency: 3 * ms},
		{Kind: idemevent.Takeover, Method: "PATCH", Route: "/v1/charges/ch_9", StoreCall: "acquire", StoreLatency: ms},
		{Kind: idemevent.Renewed, Method: "PATCH", Route: "/v1/charges/ch_9", StoreCall: "renew", StoreLatency: ms},
		{Kind: idemevent.NotStored, Method: "PATCH", Route: "/v1/charges/ch_9", Reason: exchange.ReasonLockLost, StoreCall: "complete", StoreLatency: ms},
		{Kind: idemevent.KeyInvalid, Method: "POST", Route: "/v1/charges", Status: 400},
		{Kind: idemevent.Conflict, Method: "POST", Route: "/v1/charges", Status: 409, StoreCall: "acquire", StoreLatency: 4 * ms},
	}
	tests := []struct {
		name                                   string
		opts                                   []idemotel.Option
		wantDecisions, wantOutcomes, wantLease map[string]int64
		wantFlight                             map[string]int64
	}{
		{
			name: "no route by default",
			wantDecisions: map[string]int64{
				"http.request.method=POST;idemkit.event=first;":       1,
				"http.request.method=PATCH;idemkit.event=takeover;":   1,
				"http.request.method=POST;idemkit.event=key-invalid;": 1,
				"http.request.method=POST;idemkit.event=conflict;":    1,
			},
			wantOutcomes: map[string]int64{
				"http.request.method=POST;idemkit.event=stored;":                               1,
				"http.request.method=PATCH;idemkit.event=not-stored;idemkit.reason=lock-lost;": 1,
			},
			wantLease:  map[string]int64{"http.request.method=PATCH;idemkit.event=renewed;": 1},
			wantFlight: map[string]int64{"http.request.method=POST;": 0, "http.request.method=PATCH;": 0},
		},
		{
			name: "mapped routes",
			opts: []idemotel.Option{idemotel.WithRouteMapper(func(route string) string {
				if route == "/v1/charges" {
					return route
				}
				return "/v1/charges/{id}"
			})},
			wantDecisions: map[string]int64{
				"http.request.method=POST;http.route=/v1/charges;idemkit.event=first;":          1,
				"http.request.method=PATCH;http.route=/v1/charges/{id};idemkit.event=takeover;": 1,
				"http.request.method=POST;http.route=/v1/charges;idemkit.event=key-invalid;":    1,
				"http.request.method=POST;http.route=/v1/charges;idemkit.event=conflict;":       1,
			},
			wantOutcomes: map[string]int64{
				"http.request.method=POST;http.route=/v1/charges;idemkit.event=stored;":                                    1,
				"http.request.method=PATCH;http.route=/v1/charges/{id};idemkit.event=not-stored;idemkit.reason=lock-lost;": 1,
			},
			wantLease: map[string]int64{"http.request.method=PATCH;http.route=/v1/charges/{id};idemkit.event=renewed;": 1},
			wantFlight: map[string]int64{"http.request.method=POST;http.route=/v1/charges;": 0,
				"http.request.method=PATCH;http.route=/v1/charges/{id};": 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reader := newManual(t, tt.opts...)
			for _, ev := range script {
				m.OnEvent(context.Background(), ev)
			}
			data := collect(t, reader)
			for name, want := range map[string]map[string]int64{
				idemotel.DecisionsName: tt.wantDecisions, idemotel.HandlerOutcomesName: tt.wantOutcomes,
				idemotel.LeaseEventsName: tt.wantLease,
			} {
				if got := counted(t, data[name]); !equalMaps(got, want) {
					t.Errorf("%s %v, want %v", name, got, want)
				}
			}
			if got := sums(t, data[idemotel.InFlightName]); !equalMaps(got, tt.wantFlight) {
				t.Errorf("%s %v, want %v", idemotel.InFlightName, got, tt.wantFlight)
			}
			calls := histogram(t, data[idemotel.StoreDurationName])
			want := map[string]float64{
				"idemkit.store.call=acquire;idemkit.store.result=ok;":  0.007,
				"idemkit.store.call=complete;idemkit.store.result=ok;": 0.004,
				"idemkit.store.call=renew;idemkit.store.result=ok;":    0.001,
			}
			if len(calls) != len(want) {
				t.Errorf("store calls %v, want %v", calls, want)
			}
			for k, sum := range want {
				if got := calls[k]; got.sum < sum-1e-9 || got.sum > sum+1e-9 {
					t.Errorf("store calls %s summed %vs, want %vs", k, got.sum, sum)
				}
			}
		})
	}
}

// point is a histogram's data points for one attribute set, added up.
type point struct {
	count  uint64
	sum    float64
	min    float64
	bounds []float64
	counts []uint64
}

// histogram maps each data point's attribute set, rendered, to its point.
func histogram(t *testing.T, data metricdata.Aggregation) map[string]point {
	t.Helper()
	h, ok := data.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("aggregation %T, want a float64 histogram", data)
	}
	out := map[string]point{}
	for _, dp := range h.DataPoints {
		p := point{count: dp.Count, sum: dp.Sum, bounds: dp.Bounds, counts: dp.BucketCounts}
		if v, ok := dp.Min.Value(); ok {
			p.min = v
		}
		out[render(dp.Attributes)] = p
	}
	return out
}

// Defect: one counter held decisions, handlers' outcomes and lease events,
// so a plain sum over it counted a request up to three times, and the
// 409 rate divided by a total that included lease events. Each family has
// a counter of its own, and the decisions add up to the requests guarded.
func TestEveryEventInOneFamily(t *testing.T) {
	m, reader := newManual(t)
	decisions := 0
	for _, k := range idemtest.EventKinds() {
		ev := idemevent.Event{Kind: k, Method: "POST"}
		if k == idemevent.NotStored {
			ev.Reason = exchange.ReasonStatus
		}
		m.OnEvent(context.Background(), ev)
		if k.IsDecision() {
			decisions++
		}
	}
	data := collect(t, reader)
	total := func(name string) (n int64, kinds []string) {
		for attrs, v := range counted(t, data[name]) {
			n += v
			kinds = append(kinds, attrs)
		}
		return n, kinds
	}
	if n, kinds := total(idemotel.DecisionsName); n != int64(decisions) || n != 13 {
		t.Errorf("%s: %d over %v, want the %d decisions alone", idemotel.DecisionsName, n, kinds, decisions)
	}
	if n, kinds := total(idemotel.HandlerOutcomesName); n != 2 {
		t.Errorf("%s: %d over %v, want stored and not-stored", idemotel.HandlerOutcomesName, n, kinds)
	}
	if n, kinds := total(idemotel.LeaseEventsName); n != 3 {
		t.Errorf("%s: %d over %v, want renewed, renew-error and lease-lost", idemotel.LeaseEventsName, n, kinds)
	}
	if d, o, l := len(counted(t, data[idemotel.DecisionsName])), len(counted(t, data[idemotel.HandlerOutcomesName])),
		len(counted(t, data[idemotel.LeaseEventsName])); d+o+l != len(idemtest.EventKinds()) {
		t.Errorf("%d+%d+%d series for %d event kinds: some kind is counted nowhere", d, o, l, len(idemtest.EventKinds()))
	}
}

// Defect: store latency was one sample per event, labelled by the event:
// paths that made no store call recorded 0 s, a failed Acquire folded in
// the release after it, and the buckets ended at 2.5 s, below the 5 s
// StoreTimeout, so a timeout looked like any slow call. Each call is timed
// alone, by call and result, with buckets to a minute.
func TestStoreDurationTimesEachCall(t *testing.T) {
	m, reader := newManual(t)
	ms := time.Millisecond
	down := errors.New("dial tcp 10.0.0.7:6379: i/o timeout")
	for _, ev := range []idemevent.Event{
		{Kind: idemevent.First, StoreCall: "acquire", StoreLatency: 2 * ms},
		{Kind: idemevent.Stored, StoreCall: "complete", StoreLatency: 3 * ms},
		{Kind: idemevent.StoreError, StoreCall: "acquire", StoreLatency: 5*time.Second + 3*ms, Err: down},
		{Kind: idemevent.Unprotected, StoreCall: "acquire", StoreLatency: 5*time.Second + ms, Err: down},
		{Kind: idemevent.ClientGone, StoreCall: "acquire", StoreLatency: 800 * ms},
		{Kind: idemevent.NotStored, Reason: exchange.ReasonPanic, StoreCall: "release", StoreLatency: ms},
		{Kind: idemevent.NotStored, Reason: exchange.ReasonStore, StoreCall: "complete", StoreLatency: 40 * time.Second, Err: down},
		{Kind: idemevent.Renewed, StoreCall: "renew", StoreLatency: ms},
		{Kind: idemevent.RenewError, StoreCall: "renew", StoreLatency: 5 * time.Second, Err: down},
		// No store call behind these: no sample.
		{Kind: idemevent.ClientGone},
		{Kind: idemevent.KeyInvalid},
		{Kind: idemevent.LeaseLost, Err: down},
		{Kind: idemevent.NotStored, Reason: exchange.ReasonTimeoutInside, Err: errors.New("timeout inside")},
	} {
		m.OnEvent(context.Background(), ev)
	}
	calls := histogram(t, collect(t, reader)[idemotel.StoreDurationName])
	want := map[string]uint64{
		"idemkit.store.call=acquire;idemkit.store.result=ok;":        1,
		"idemkit.store.call=acquire;idemkit.store.result=error;":     2,
		"idemkit.store.call=acquire;idemkit.store.result=cancelled;": 1,
		"idemkit.store.call=complete;idemkit.store.result=ok;":       1,
		"idemkit.store.call=complete;idemkit.store.result=error;":    1,
		"idemkit.store.call=release;idemkit.store.result=ok;":        1,
		"idemkit.store.call=renew;idemkit.store.result=ok;":          1,
		"idemkit.store.call=renew;idemkit.store.result=error;":       1,
	}
	if len(calls) != len(want) {
		t.Errorf("%d series, want %d: %v", len(calls), len(want), calls)
	}
	for k, n := range want {
		p := calls[k]
		if p.count != n {
			t.Errorf("%s: %d samples, want %d", k, p.count, n)
		}
		if p.min <= 0 {
			t.Errorf("%s: a sample of %vs, from an event that made no call", k, p.min)
		}
	}
	// The failed acquires took the 5 s StoreTimeout: they fall in a
	// bucket of their own, between 5 and 6 s, not in the overflow.
	p := calls["idemkit.store.call=acquire;idemkit.store.result=error;"]
	for i, b := range p.bounds {
		if (b == 6) != (p.counts[i] == 2) {
			t.Errorf("acquire errors: bucket ≤%v holds %d, want both timeouts in the one ending at 6 s (bounds %v)", b, p.counts[i], p.bounds)
		}
	}
	if last := p.bounds[len(p.bounds)-1]; last < 30 || p.bounds[0] > 0.0001 {
		t.Errorf("bounds %v: want 100 µs to at least 30 s", p.bounds)
	}
	if c := calls["idemkit.store.call=complete;idemkit.store.result=error;"]; c.counts[len(c.counts)-1] != 0 {
		t.Errorf("a 40 s call fell in the overflow bucket of %v", c.bounds)
	}
}

// Defect: the handler's duration (Event.Duration of stored and not-stored)
// was computed and dropped. It is recorded, with buckets up to the lease.
func TestHandlerDurationUpToTheLease(t *testing.T) {
	for _, tt := range []struct {
		name  string
		opts  []idemotel.Option
		lease float64
	}{
		{"default lease", nil, 30},
		{"lease of 2 s", []idemotel.Option{idemotel.WithLease(2 * time.Second)}, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, reader := newManual(t, tt.opts...)
			held := time.Duration(tt.lease * 0.8 * float64(time.Second))
			for _, ev := range []idemevent.Event{
				{Kind: idemevent.First, Method: "POST", Duration: time.Millisecond, StoreCall: "acquire", StoreLatency: time.Millisecond},
				{Kind: idemevent.Stored, Method: "POST", Duration: held},
				{Kind: idemevent.NotStored, Method: "POST", Reason: exchange.ReasonStatus, Duration: 2 * held},
				{Kind: idemevent.Renewed, Method: "POST", Duration: held / 2},
			} {
				m.OnEvent(context.Background(), ev)
			}
			h := histogram(t, collect(t, reader)[idemotel.HandlerDurationName])
			p, ok := h["http.request.method=POST;"]
			if len(h) != 1 || !ok || p.count != 2 {
				t.Fatalf("handler durations %v, want the stored and the not-stored, by method", h)
			}
			if want := held.Seconds() * 3; p.sum < want-1e-6 || p.sum > want+1e-6 {
				t.Errorf("sum %v, want %v", p.sum, want)
			}
			n := len(p.bounds)
			if p.bounds[n-1] != tt.lease || p.bounds[n-2] >= tt.lease || p.bounds[n-2] < 0.8*tt.lease {
				t.Errorf("bounds %v: want them to end at the lease, %v s, with one just below it", p.bounds, tt.lease)
			}
			// 0.8 of the lease lies between 3/4 and 9/10 of it; twice that
			// is past it.
			if p.counts[n-2] != 1 || p.counts[n] != 1 {
				t.Errorf("bucket counts %v over %v", p.counts, p.bounds)
			}
		})
	}
}

// Defect: nothing showed a memory store filling up before its 429s began.
func TestMemoryStoreGauges(t *testing.T) {
	store := memstore.New(memstore.WithMaxRecords(10), memstore.WithPurgeInterval(0))
	t.Cleanup(func() { store.Close() })
	_, reader := newManual(t, idemotel.WithMemoryStore(store))
	engine := idem.New(idem.Config{Store: store, TTL: time.Minute, Logger: slog.New(slog.DiscardHandler)})
	for i := range 3 {
		d := engine.Adapter().Begin(context.Background(), exchange.Request{Method: "POST", Path: "/v1/charges",
			KeyLines: []string{fmt.Sprintf(`"k-%d"`, i)}, Body: []byte(`{}`)})
		if f := d.Lock.Finish(context.Background(), 201, nil); f.Outcome != exchange.Recorded {
			t.Fatalf("Finish: %+v", f)
		}
	}
	value := func(data map[string]metricdata.Aggregation, name string) float64 {
		switch a := data[name].(type) {
		case metricdata.Gauge[int64]:
			return float64(a.DataPoints[0].Value)
		case metricdata.Sum[int64]:
			return float64(a.DataPoints[0].Value)
		case metricdata.Sum[float64]:
			return a.DataPoints[0].Value
		}
		t.Fatalf("%s: %T", name, data[name])
		return 0
	}
	data := collect(t, reader)
	if r, l := value(data, idemotel.MemstoreRecordsName), value(data, idemotel.MemstoreRecordsLimitName); r != 3 || l != 10 {
		t.Errorf("records %v of %v, want 3 of 10", r, l)
	}
	if _, err := store.Purge(context.Background(), time.Now().Add(time.Hour), 100); err != nil {
		t.Fatal(err)
	}
	data = collect(t, reader)
	if r := value(data, idemotel.MemstoreRecordsName); r != 0 {
		t.Errorf("records %v after the purge, want 0", r)
	}
	if b, d, s := value(data, idemotel.MemstorePurgeBatchesName), value(data, idemotel.MemstorePurgeDeletedName),
		value(data, idemotel.MemstorePurgeTimeName); b != 1 || d != 3 || s <= 0 {
		t.Errorf("purges: %v batches deleted %v records in %vs, want 1, 3 and some time", b, d, s)
	}
}

func TestInFlightRises(t *testing.T) {
	m, reader := newManual(t)
	ctx := context.Background()
	m.OnEvent(ctx, idemevent.Event{Kind: idemevent.First, Method: "POST"})
	m.OnEvent(ctx, idemevent.Event{Kind: idemevent.Takeover, Method: "POST"})
	m.OnEvent(ctx, idemevent.Event{Kind: idemevent.Replay, Method: "POST"})
	if got := sums(t, collect(t, reader)[idemotel.InFlightName]); got["http.request.method=POST;"] != 2 {
		t.Errorf("in flight %v, want 2 after a first and a takeover", got)
	}
	m.OnEvent(ctx, idemevent.Event{Kind: idemevent.NotStored, Method: "POST", Reason: exchange.ReasonPanic})
	if got := sums(t, collect(t, reader)[idemotel.InFlightName]); got["http.request.method=POST;"] != 1 {
		t.Errorf("in flight %v, want 1 after one ended", got)
	}
}

func equalMaps(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Defect: a series appeared at its first event, with the value 1, and
// rate() over 1, 1, 1 is 0: the first lost lease or unprotected request
// of a process paged no one. The series of the guarded methods are there
// at zero from New on (WithMethods), and those of another method or route
// from its first event on, before the events an alert waits for.
func TestSeriesStartAtZero(t *testing.T) {
	_, reader := newManual(t)
	data := collect(t, reader)
	for name, want := range map[string][]string{
		idemotel.DecisionsName:       {"http.request.method=POST;idemkit.event=unprotected;", "http.request.method=PATCH;idemkit.event=store-error;"},
		idemotel.HandlerOutcomesName: {"http.request.method=POST;idemkit.event=not-stored;idemkit.reason=lock-lost;"},
		idemotel.LeaseEventsName:     {"http.request.method=POST;idemkit.event=lease-lost;"},
		idemotel.InFlightName:        {"http.request.method=POST;"},
	} {
		got := sums(t, data[name])
		for _, series := range want {
			if v, ok := got[series]; !ok || v != 0 {
				t.Errorf("%s{%s} is %d (present %v) before any event, want 0", name, series, v, ok)
			}
		}
	}

	m, reader := newManual(t, idemotel.WithMethods("POST", "JOB"), idemotel.WithRouteMapper(func(string) string { return "/v1/charges" }))
	if d := collect(t, reader)[idemotel.DecisionsName]; d != nil {
		t.Errorf("with a route mapper, series before any event: %v; want none (their routes are unknown)", sums(t, d))
	}
	m.OnEvent(context.Background(), idemevent.Event{Kind: idemevent.First, Method: "POST", Route: "/v1/charges"})
	got := sums(t, collect(t, reader)[idemotel.LeaseEventsName])
	if v, ok := got["http.request.method=POST;http.route=/v1/charges;idemkit.event=lease-lost;"]; !ok || v != 0 {
		t.Errorf("after the route's first event, its lease-lost series: %d (present %v), want 0; all: %v", v, ok, got)
	}

	_, reader = newManual(t, idemotel.WithMethods("JOB"))
	got = sums(t, collect(t, reader)[idemotel.DecisionsName])
	if _, ok := got["http.request.method=JOB;idemkit.event=unprotected;"]; !ok {
		t.Errorf("WithMethods(JOB): %v, want the JOB series at zero", got)
	}
	if _, ok := got["http.request.method=POST;idemkit.event=unprotected;"]; ok {
		t.Errorf("WithMethods(JOB) made POST's series too: %v", got)
	}
}
