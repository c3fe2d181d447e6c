package idemotel

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// ScopeName is the instrumentation scope of the instruments.
const ScopeName = "github.com/idemkit/idemkit/observability/otel"

// Instrument names, as OpenTelemetry sees them. docs/operations.md lists
// each with its type, unit, attributes and the name a Prometheus scrape
// shows.
const (
	// DecisionsName counts guarded requests, one per request: the events
	// whose kind is a decision (idemevent.Kind.IsDecision).
	DecisionsName = "idemkit.decisions"
	// HandlerOutcomesName counts what became of handlers that ran: stored
	// or not-stored.
	HandlerOutcomesName = "idemkit.handler.outcomes"
	// LeaseEventsName counts the events of running handlers' leases:
	// renewed, renew-error, lease-lost.
	LeaseEventsName = "idemkit.lease.events"
	// StoreDurationName is the histogram of store calls, each timed alone.
	StoreDurationName = "idemkit.store.duration"
	// HandlerDurationName is the histogram of how long requests whose
	// handler ran held their key.
	HandlerDurationName = "idemkit.handler.duration"
	// InFlightName counts the requests holding a key while their handler runs.
	InFlightName = "idemkit.in_flight"

	// The memory store's gauges and counters, with WithMemoryStore.
	MemstoreRecordsName      = "idemkit.memstore.records"
	MemstoreRecordsLimitName = "idemkit.memstore.records.limit"
	MemstorePurgeBatchesName = "idemkit.memstore.purge.batches"
	MemstorePurgeDeletedName = "idemkit.memstore.purge.deleted"
	MemstorePurgeTimeName    = "idemkit.memstore.purge.time"
)

// Attribute keys of the metrics. The request's method and route take the
// names of OpenTelemetry's HTTP conventions.
const (
	// AttrEvent is the event kind (idemevent.Kind.String), on the three
	// counters of events.
	AttrEvent = attribute.Key("idemkit.event")
	// AttrReason is why a response was not stored, on not-stored only.
	AttrReason = attribute.Key("idemkit.reason")
	// AttrMethod is the request's method.
	AttrMethod = attribute.Key("http.request.method")
	// AttrRoute is the request's route as WithRouteMapper maps it; absent
	// without a mapper.
	AttrRoute = attribute.Key("http.route")
	// AttrStoreCall names a store call: acquire, complete, release, renew.
	AttrStoreCall = attribute.Key("idemkit.store.call")
	// AttrStoreResult is how a store call ended: ok, error, or cancelled
	// (the client went away while it ran).
	AttrStoreResult = attribute.Key("idemkit.store.result")
)

// Span attribute keys, set on span events and, for decisions, on the span.
const (
	SpanAttrKeyHash = attribute.Key("idempotency.key_hash")
	SpanAttrOutcome = attribute.Key("idempotency.outcome")
	SpanAttrReason  = attribute.Key("idempotency.reason")
	SpanAttrStatus  = attribute.Key("http.response.status_code")
)

// storeDurationBuckets reach from an in-memory store's microseconds to a
// minute: past the Engine's StoreTimeout (5 s by default), so that a call
// that ran into it shows as such; 5 and 6 bracket that default. The SDK's
// default buckets are meant for milliseconds.
var storeDurationBuckets = []float64{
	0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 6, 10, 30, 60,
}

// handlerDurationBuckets returns the buckets of the handler duration for
// a lease: the usual steps below half of it, then half, three quarters,
// nine tenths and the whole lease, where a handler nears the point at
// which only its renewals keep its key.
func handlerDurationBuckets(lease time.Duration) []float64 {
	l := lease.Seconds()
	var b []float64
	for _, v := range []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000} {
		if v < l/2 {
			b = append(b, v)
		}
	}
	return append(b, l/2, l*3/4, l*9/10, l)
}

// Metrics records the Engine's events. It is safe for concurrent use.
type Metrics struct {
	decisions, outcomes, lease metric.Int64Counter
	storeDuration              metric.Float64Histogram
	handlerDuration            metric.Float64Histogram
	inFlight                   metric.Int64UpDownCounter
	route                      func(string) string
	spans                      bool

	// Building an attribute set sorts and allocates; the combinations in
	// use are few, so each is built once and kept.
	storeAttrs  [len(storeCalls)][storeResults][]metric.RecordOption
	series      sync.Map // seriesKey -> *seriesAttrs
	seriesCount atomic.Int64
	// zeroed holds the method and route pairs whose series were created
	// at zero (startAtZero).
	zeroed      sync.Map // requestKey -> struct{}
	zeroedCount atomic.Int64
}

// requestKey is a method and a route, as their series carry them.
type requestKey struct{ method, route string }

// maxCachedSeries bounds the cache of attribute sets, in case a route
// mapper returns unbounded values: past it, sets are built per event.
const maxCachedSeries = 4096

type seriesKey struct {
	kind                  idemevent.Kind
	reason, method, route string
}

// seriesAttrs holds option slices rather than options: passing a slice
// on to a variadic parameter does not allocate a new one per call.
type seriesAttrs struct {
	count      []metric.AddOption    // the event's counter
	request    []metric.AddOption    // in flight: method and route alone
	requestRec []metric.RecordOption // handler duration: the same set
}

// New creates the instruments on the configured MeterProvider.
func New(opts ...Option) (*Metrics, error) {
	o := options{lease: defaultLease}
	for _, opt := range opts {
		opt(&o)
	}
	if o.provider == nil {
		o.provider = otel.GetMeterProvider()
	}
	meter := o.provider.Meter(ScopeName)
	m := &Metrics{route: o.route, spans: !o.noSpans}
	var err error
	counter := func(name, unit, desc string) metric.Int64Counter {
		var c metric.Int64Counter
		if err == nil {
			c, err = meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		}
		return c
	}
	m.decisions = counter(DecisionsName, "{request}",
		"Guarded requests, one per request, by the Engine's decision (idemkit.event).")
	m.outcomes = counter(HandlerOutcomesName, "{request}",
		"Requests whose handler ran, by whether the response was stored (idemkit.event) and why not (idemkit.reason).")
	m.lease = counter(LeaseEventsName, "{event}",
		"Events of running handlers' leases: renewed, renew-error, lease-lost (idemkit.event).")
	if err != nil {
		return nil, err
	}
	if m.storeDuration, err = meter.Float64Histogram(StoreDurationName,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of each idempotency store call, by call and result."),
		metric.WithExplicitBucketBoundaries(storeDurationBuckets...)); err != nil {
		return nil, err
	}
	if m.handlerDuration, err = meter.Float64Histogram(HandlerDurationName,
		metric.WithUnit("s"),
		metric.WithDescription("How long requests whose handler ran held their idempotency key, up to the lease."),
		metric.WithExplicitBucketBoundaries(handlerDurationBuckets(o.lease)...)); err != nil {
		return nil, err
	}
	if m.inFlight, err = meter.Int64UpDownCounter(InFlightName,
		metric.WithUnit("{request}"),
		metric.WithDescription("Requests holding an idempotency key while their handler runs.")); err != nil {
		return nil, err
	}
	for c, call := range storeCalls {
		for r := range storeResults {
			set := attribute.NewSet(AttrStoreCall.String(call), AttrStoreResult.String(storeResultNames[r]))
			m.storeAttrs[c][r] = []metric.RecordOption{metric.WithAttributeSet(set)}
		}
	}
	if o.memstore != nil {
		if err := observeMemstore(meter, o.memstore); err != nil {
			return nil, err
		}
	}
	if m.route == nil {
		methods := o.methods
		if methods == nil {
			methods = defaultMethods
		}
		for _, method := range methods {
			m.startAtZero(requestKey{method: method})
		}
	}
	return m, nil
}

// zeroKinds are the series startAtZero creates for a method and route:
// every decision, and every outcome and lease event an alert reads.
var zeroKinds = func() []seriesKey {
	var ks []seriesKey
	for k := idemevent.Kind(1); k.String() != "unknown"; k++ {
		if familyOf(k) != familyNone && k != idemevent.NotStored {
			ks = append(ks, seriesKey{kind: k})
		}
	}
	for _, r := range []exchange.Reason{exchange.ReasonLockLost, exchange.ReasonStore, exchange.ReasonTimeoutInside} {
		ks = append(ks, seriesKey{kind: idemevent.NotStored, reason: string(r)})
	}
	return ks
}()

// startAtZero creates the counters' series of a method and route at zero,
// and the in-flight gauge's, once: a series that first appears with the
// value 1 shows no increase to rate() or increase(), so without it the
// first lost lease or unprotected request of a process would go unseen.
func (m *Metrics) startAtZero(rk requestKey) {
	if m.zeroedCount.Load() >= maxCachedSeries {
		return
	}
	if _, loaded := m.zeroed.LoadOrStore(rk, struct{}{}); loaded {
		return
	}
	m.zeroedCount.Add(1)
	ctx := context.Background()
	for _, k := range zeroKinds {
		k.method, k.route = rk.method, rk.route
		a := newSeriesAttrs(k, m.route != nil)
		switch familyOf(k.kind) {
		case familyDecision:
			m.decisions.Add(ctx, 0, a.count...)
		case familyOutcome:
			m.outcomes.Add(ctx, 0, a.count...)
		case familyLease:
			m.lease.Add(ctx, 0, a.count...)
		}
	}
	m.inFlight.Add(ctx, 0, newSeriesAttrs(seriesKey{method: rk.method, route: rk.route}, m.route != nil).request...)
}

// The store calls an event can name (idemevent.Event.StoreCall).
var storeCalls = [...]string{"acquire", "complete", "release", "renew"}

// How a store call ended.
const (
	resultOK = iota
	resultError
	resultCancelled
	storeResults
)

var storeResultNames = [storeResults]string{"ok", "error", "cancelled"}

// OnEvent records ev; give it to idem.Config.OnEvent. It counts the event
// in its family (a decision, a handler's outcome or a lease event), times
// the store call behind it, if any, records how long a request that ran
// held its key, keeps the in-flight count (up on first and takeover, down
// on stored and not-stored), and annotates the recording span in ctx, if
// any (see the package documentation).
func (m *Metrics) OnEvent(ctx context.Context, ev idemevent.Event) {
	attrs := m.attrs(&ev)
	switch familyOf(ev.Kind) {
	case familyDecision:
		m.decisions.Add(ctx, 1, attrs.count...)
		if ev.Kind == idemevent.First || ev.Kind == idemevent.Takeover {
			m.inFlight.Add(ctx, 1, attrs.request...)
		}
	case familyOutcome:
		m.outcomes.Add(ctx, 1, attrs.count...)
		m.inFlight.Add(ctx, -1, attrs.request...)
		m.handlerDuration.Record(ctx, ev.Duration.Seconds(), attrs.requestRec...)
	case familyLease:
		m.lease.Add(ctx, 1, attrs.count...)
	}
	if ev.StoreCall != "" {
		m.storeDuration.Record(ctx, ev.StoreLatency.Seconds(), m.storeCallAttrs(&ev)...)
	}
	if m.spans {
		annotate(ctx, &ev)
	}
}

// The families of events, each counted by an instrument of its own, so
// that no sum over one of them counts a request twice.
const (
	familyNone = iota
	familyDecision
	familyOutcome
	familyLease
)

func familyOf(k idemevent.Kind) int {
	switch {
	case k == idemevent.Stored || k == idemevent.NotStored:
		return familyOutcome
	case k == idemevent.Renewed || k == idemevent.RenewError || k == idemevent.LeaseLost:
		return familyLease
	case k.IsDecision():
		return familyDecision
	}
	return familyNone
}

// storeCallAttrs returns the attributes of the store call behind ev. A
// call the store answered after its client left (client-gone) is counted
// apart, as cancelled: no error of the store. One that ran into
// StoreTimeout is the store's error, whoever left first: the Engine makes
// it a store-error, with its error.
func (m *Metrics) storeCallAttrs(ev *idemevent.Event) []metric.RecordOption {
	result := resultOK
	switch {
	case ev.Kind == idemevent.ClientGone:
		result = resultCancelled
	case ev.Err != nil:
		result = resultError
	}
	for c, call := range storeCalls {
		if call == ev.StoreCall {
			return m.storeAttrs[c][result]
		}
	}
	set := attribute.NewSet(AttrStoreCall.String(ev.StoreCall), AttrStoreResult.String(storeResultNames[result]))
	return []metric.RecordOption{metric.WithAttributeSet(set)}
}

// attrs returns the attribute sets of an event's series.
func (m *Metrics) attrs(ev *idemevent.Event) *seriesAttrs {
	key := seriesKey{kind: ev.Kind, method: ev.Method}
	if ev.Kind == idemevent.NotStored {
		key.reason = string(ev.Reason)
	}
	if m.route != nil {
		key.route = m.route(ev.Route)
	}
	if a, ok := m.series.Load(key); ok {
		return a.(*seriesAttrs)
	}
	m.startAtZero(requestKey{method: key.method, route: key.route})
	a := newSeriesAttrs(key, m.route != nil)
	if m.seriesCount.Load() < maxCachedSeries {
		if _, loaded := m.series.LoadOrStore(key, a); !loaded {
			m.seriesCount.Add(1)
		}
	}
	return a
}

func newSeriesAttrs(k seriesKey, withRoute bool) *seriesAttrs {
	// The in-flight series share every attribute but the event and
	// reason, so that each -1 meets the +1 of its request.
	common := make([]attribute.KeyValue, 0, 4)
	common = append(common, AttrMethod.String(k.method))
	if withRoute {
		common = append(common, AttrRoute.String(k.route))
	}
	all := append(common[:len(common):len(common)], AttrEvent.String(k.kind.String()))
	if k.kind == idemevent.NotStored {
		all = append(all, AttrReason.String(k.reason))
	}
	request := attribute.NewSet(common...)
	return &seriesAttrs{
		count:      []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(all...))},
		request:    []metric.AddOption{metric.WithAttributeSet(request)},
		requestRec: []metric.RecordOption{metric.WithAttributeSet(request)},
	}
}
