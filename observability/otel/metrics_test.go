package idemotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	idem "github.com/idemkit/idemkit/core"
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

func render(s attribute.Set) string {
	var out string
	for _, kv := range s.ToSlice() {
		out += string(kv.Key) + "=" + kv.Value.Emit() + ";"
	}
	return out
}

func TestOnEventAttributes(t *testing.T) {
	ms := time.Millisecond
	script := []idem.Event{
		{Kind: idem.EventFirst, Method: "POST", Route: "/v1/charges", StoreLatency: 2 * ms},
		{Kind: idem.EventStored, Method: "POST", Route: "/v1/charges", Status: 201, StoreLatency: 3 * ms},
		{Kind: idem.EventTakeover, Method: "PATCH", Route: "/v1/charges/ch_9", StoreLatency: ms},
		{Kind: idem.EventNotStored, Method: "PATCH", Route: "/v1/charges/ch_9", Reason: idem.ReasonLockLost, StoreLatency: ms},
		{Kind: idem.EventKeyInvalid, Method: "POST", Route: "/v1/charges", Status: 400},
		{Kind: idem.EventConflict, Method: "POST", Route: "/v1/charges", Status: 409, StoreLatency: 4 * ms},
	}
	tests := []struct {
		name       string
		opts       []idemotel.Option
		wantEvents map[string]int64
		wantFlight map[string]int64
	}{
		{
			name: "no route by default",
			wantEvents: map[string]int64{
				"method=POST;outcome=first;":                        1,
				"method=POST;outcome=stored;":                       1,
				"method=PATCH;outcome=takeover;":                    1,
				"method=PATCH;outcome=not-stored;reason=lock-lost;": 1,
				"method=POST;outcome=key-invalid;":                  1,
				"method=POST;outcome=conflict;":                     1,
			},
			wantFlight: map[string]int64{"method=POST;": 0, "method=PATCH;": 0},
		},
		{
			name: "mapped routes",
			opts: []idemotel.Option{idemotel.WithRouteMapper(func(route string) string {
				if route == "/v1/charges" {
					return route
				}
				return "/v1/charges/{id}"
			})},
			wantEvents: map[string]int64{
				"method=POST;outcome=first;route=/v1/charges;":                             1,
				"method=POST;outcome=stored;route=/v1/charges;":                            1,
				"method=PATCH;outcome=takeover;route=/v1/charges/{id};":                    1,
				"method=PATCH;outcome=not-stored;reason=lock-lost;route=/v1/charges/{id};": 1,
				"method=POST;outcome=key-invalid;route=/v1/charges;":                       1,
				"method=POST;outcome=conflict;route=/v1/charges;":                          1,
			},
			wantFlight: map[string]int64{"method=POST;route=/v1/charges;": 0, "method=PATCH;route=/v1/charges/{id};": 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, reader := newManual(t, tt.opts...)
			for _, ev := range script {
				m.OnEvent(context.Background(), ev)
			}
			data := collect(t, reader)
			if got := sums(t, data[idemotel.EventsName]); !equalMaps(got, tt.wantEvents) {
				t.Errorf("events %v, want %v", got, tt.wantEvents)
			}
			if got := sums(t, data[idemotel.InFlightName]); !equalMaps(got, tt.wantFlight) {
				t.Errorf("in flight %v, want %v", got, tt.wantFlight)
			}
			h, ok := data[idemotel.StoreLatencyName].(metricdata.Histogram[float64])
			if !ok {
				t.Fatalf("latency aggregation %T, want a float64 histogram", data[idemotel.StoreLatencyName])
			}
			var count uint64
			var sum float64
			for _, dp := range h.DataPoints {
				count += dp.Count
				sum += dp.Sum
				if len(dp.Attributes.ToSlice()) != 1 {
					t.Errorf("latency attributes %s, want only the outcome", render(dp.Attributes))
				}
				if len(dp.Bounds) == 0 || dp.Bounds[0] > 0.001 {
					t.Errorf("latency buckets %v do not resolve sub-millisecond calls", dp.Bounds)
				}
			}
			if count != 5 || sum < 0.0109 || sum > 0.0111 {
				t.Errorf("latency: %d calls summing %vs, want 5 summing 0.011s", count, sum)
			}
		})
	}
}

func TestInFlightRises(t *testing.T) {
	m, reader := newManual(t)
	ctx := context.Background()
	m.OnEvent(ctx, idem.Event{Kind: idem.EventFirst, Method: "POST"})
	m.OnEvent(ctx, idem.Event{Kind: idem.EventTakeover, Method: "POST"})
	m.OnEvent(ctx, idem.Event{Kind: idem.EventReplay, Method: "POST"})
	if got := sums(t, collect(t, reader)[idemotel.InFlightName]); got["method=POST;"] != 2 {
		t.Errorf("in flight %v, want 2 after a first and a takeover", got)
	}
	m.OnEvent(ctx, idem.Event{Kind: idem.EventNotStored, Method: "POST", Reason: idem.ReasonPanic})
	if got := sums(t, collect(t, reader)[idemotel.InFlightName]); got["method=POST;"] != 1 {
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
