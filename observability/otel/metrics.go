package idemotel

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	idem "github.com/idemkit/idemkit/core"
)

// ScopeName is the instrumentation scope of the instruments.
const ScopeName = "github.com/idemkit/idemkit/observability/otel"

// Instrument names, as OpenTelemetry sees them. See the package
// documentation for the names a Prometheus scrape shows.
const (
	EventsName       = "idemkit.events"
	StoreLatencyName = "idemkit.store.latency"
	InFlightName     = "idemkit.in_flight"
)

// Attribute keys.
const (
	AttrOutcome = attribute.Key("outcome")
	AttrReason  = attribute.Key("reason")
	AttrMethod  = attribute.Key("method")
	AttrRoute   = attribute.Key("route")
)

// Span attribute keys, set on span events and, for decisions, on the span.
const (
	SpanAttrKeyHash = attribute.Key("idempotency.key_hash")
	SpanAttrOutcome = attribute.Key("idempotency.outcome")
	SpanAttrReason  = attribute.Key("idempotency.reason")
	SpanAttrStatus  = attribute.Key("http.response.status_code")
)

// storeLatencyBuckets suit store calls, from an in-memory store's
// microseconds to a struggling database's seconds; the SDK's default
// buckets are meant for milliseconds and would put every call in the first.
var storeLatencyBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
}

// Metrics records the Engine's events. It is safe for concurrent use.
type Metrics struct {
	events   metric.Int64Counter
	latency  metric.Float64Histogram
	inFlight metric.Int64UpDownCounter
	route    func(string) string
	spans    bool

	// Building an attribute set sorts and allocates; the combinations in
	// use are few, so each is built once and kept.
	latencyAttrs [][]metric.RecordOption // by event kind
	series       sync.Map                // seriesKey -> *seriesAttrs
	seriesCount  atomic.Int64
}

// maxCachedSeries bounds the cache of attribute sets, in case a route
// mapper returns unbounded values: past it, sets are built per event.
const maxCachedSeries = 4096

type seriesKey struct {
	kind                  idem.EventKind
	reason, method, route string
}

// seriesAttrs holds option slices rather than options: passing a slice
// on to a variadic parameter does not allocate a new one per call.
type seriesAttrs struct {
	events, inFlight []metric.AddOption
}

// New creates the instruments on the configured MeterProvider.
func New(opts ...Option) (*Metrics, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.provider == nil {
		o.provider = otel.GetMeterProvider()
	}
	meter := o.provider.Meter(ScopeName)
	m := &Metrics{route: o.route, spans: !o.noSpans}
	var err error
	if m.events, err = meter.Int64Counter(EventsName,
		metric.WithUnit("{event}"),
		metric.WithDescription("Idempotency decisions and outcomes, by outcome (the event kind).")); err != nil {
		return nil, err
	}
	if m.latency, err = meter.Float64Histogram(StoreLatencyName,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of the idempotency store call behind an event."),
		metric.WithExplicitBucketBoundaries(storeLatencyBuckets...)); err != nil {
		return nil, err
	}
	if m.inFlight, err = meter.Int64UpDownCounter(InFlightName,
		metric.WithUnit("{request}"),
		metric.WithDescription("Requests holding an idempotency key while their handler runs.")); err != nil {
		return nil, err
	}
	m.latencyAttrs = make([][]metric.RecordOption, len(idem.EventKinds())+1)
	for k := range m.latencyAttrs {
		m.latencyAttrs[k] = []metric.RecordOption{
			metric.WithAttributeSet(attribute.NewSet(AttrOutcome.String(idem.EventKind(k).String()))),
		}
	}
	return m, nil
}

// OnEvent records ev; give it to idem.Config.OnEvent. It counts the event,
// records the store latency of events that called the store, keeps the
// in-flight count (up on first and takeover, down on stored and
// not-stored), and adds a span event "idempotency.<outcome>" to the
// recording span in ctx, if any. Decisions also set the span attributes
// idempotency.outcome and idempotency.key_hash.
func (m *Metrics) OnEvent(ctx context.Context, ev idem.Event) {
	attrs := m.attrs(&ev)
	switch ev.Kind {
	case idem.EventFirst, idem.EventTakeover:
		m.inFlight.Add(ctx, 1, attrs.inFlight...)
	case idem.EventStored, idem.EventNotStored:
		m.inFlight.Add(ctx, -1, attrs.inFlight...)
	}
	m.events.Add(ctx, 1, attrs.events...)
	if callsStore(ev.Kind) {
		m.latency.Record(ctx, ev.StoreLatency.Seconds(), m.latencyAttrs[ev.Kind]...)
	}
	if m.spans {
		annotate(ctx, &ev)
	}
}

// attrs returns the attribute sets of an event's series.
func (m *Metrics) attrs(ev *idem.Event) *seriesAttrs {
	key := seriesKey{kind: ev.Kind, method: ev.Method}
	if ev.Kind == idem.EventNotStored {
		key.reason = string(ev.Reason)
	}
	if m.route != nil {
		key.route = m.route(ev.Route)
	}
	if a, ok := m.series.Load(key); ok {
		return a.(*seriesAttrs)
	}
	a := newSeriesAttrs(key, m.route != nil)
	if m.seriesCount.Load() < maxCachedSeries {
		if _, loaded := m.series.LoadOrStore(key, a); !loaded {
			m.seriesCount.Add(1)
		}
	}
	return a
}

func newSeriesAttrs(k seriesKey, withRoute bool) *seriesAttrs {
	// The in-flight series share every attribute but the outcome and
	// reason, so that each -1 meets the +1 of its request.
	common := make([]attribute.KeyValue, 0, 4)
	common = append(common, AttrMethod.String(k.method))
	if withRoute {
		common = append(common, AttrRoute.String(k.route))
	}
	all := append(common[:len(common):len(common)], AttrOutcome.String(k.kind.String()))
	if k.kind == idem.EventNotStored {
		all = append(all, AttrReason.String(k.reason))
	}
	return &seriesAttrs{
		events:   []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(all...))},
		inFlight: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(common...))},
	}
}

// callsStore reports whether an event of this kind follows a store call,
// whose latency the event carries.
func callsStore(k idem.EventKind) bool {
	switch k {
	case idem.EventFirst, idem.EventTakeover, idem.EventReplay, idem.EventConflict, idem.EventMismatch,
		idem.EventStoreError, idem.EventStoreFull, idem.EventStored, idem.EventNotStored, idem.EventRenewError:
		return true
	}
	return false
}

func annotate(ctx context.Context, ev *idem.Event) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	kind := ev.Kind.String()
	hash := ev.KeyHash()
	var buf [3]attribute.KeyValue
	attrs := buf[:0]
	if hash != "" {
		attrs = append(attrs, SpanAttrKeyHash.String(hash))
	}
	if ev.Status != 0 {
		attrs = append(attrs, SpanAttrStatus.Int(ev.Status))
	}
	if ev.Reason != "" {
		attrs = append(attrs, SpanAttrReason.String(string(ev.Reason)))
	}
	span.AddEvent("idempotency."+kind, trace.WithAttributes(attrs...))
	if ev.Kind.IsDecision() {
		span.SetAttributes(SpanAttrOutcome.String(kind))
		if hash != "" {
			span.SetAttributes(SpanAttrKeyHash.String(hash))
		}
	}
	if ev.Err != nil {
		span.RecordError(ev.Err)
	}
}
