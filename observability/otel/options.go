package idemotel

import (
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/idemkit/idemkit/core/memstore"
)

// Option configures Metrics.
type Option func(*options)

type options struct {
	provider metric.MeterProvider
	route    func(route string) string
	noSpans  bool
	lease    time.Duration
	memstore *memstore.Store
	methods  []string
}

// defaultMethods are the methods the Engine guards by default.
var defaultMethods = []string{"POST", "PATCH"}

// defaultLease is the Engine's default Config.Lease.
const defaultLease = 30 * time.Second

// WithMeterProvider sets where the instruments are created. Default: the
// global MeterProvider (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) {
		if mp != nil {
			o.provider = mp
		}
	}
}

// WithRouteMapper adds the http.route attribute to the counters and the
// handler duration, computed by mapRoute from the event's route, which is
// the raw request path without its query (such as
// "/v1/charges/ch_123/refunds"). Every distinct value it returns is a time
// series per event and method, so it must map paths to a small, fixed set:
// route templates such as "/v1/charges/{id}/refunds", and a constant such
// as "other" for anything else. Default: no route attribute.
func WithRouteMapper(mapRoute func(route string) string) Option {
	return func(o *options) { o.route = mapRoute }
}

// WithoutSpanEvents stops OnEvent from adding events, attributes and a
// status to the active span. Default: spans that are recording get them.
func WithoutSpanEvents() Option {
	return func(o *options) { o.noSpans = true }
}

// WithLease sets the Engine's Config.Lease, which the buckets of the
// handler duration reach (see [HandlerDurationName]): give it the lease
// the Engine is configured with. Default: the Engine's default, 30 s;
// d <= 0 leaves it.
func WithLease(d time.Duration) Option {
	return func(o *options) {
		if d > 0 {
			o.lease = d
		}
	}
}

// WithMemoryStore adds gauges of the records s holds against its bound
// (WithMaxRecords), and counters of its purges, read from s.Stats at each
// collection. Default: none.
func WithMemoryStore(s *memstore.Store) Option {
	return func(o *options) { o.memstore = s }
}

// WithMethods names the methods the Engine guards (its Config.Methods, and
// "JOB" for Engine.Do), whose series New creates at zero: a series that
// appears at its first event with the value 1 shows no increase to rate()
// or increase(), and the first lost lease or unprotected request of a
// process would page no one. Series of other methods, and of routes
// (WithRouteMapper), are created at zero when their method and route are
// first seen. Default: POST and PATCH.
func WithMethods(methods ...string) Option {
	return func(o *options) { o.methods = methods }
}
