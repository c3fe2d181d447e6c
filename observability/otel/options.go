package idemotel

import "go.opentelemetry.io/otel/metric"

// Option configures Metrics.
type Option func(*options)

type options struct {
	provider metric.MeterProvider
	route    func(route string) string
	noSpans  bool
}

// WithMeterProvider sets where the instruments are created. Default: the
// global MeterProvider (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) {
		if mp != nil {
			o.provider = mp
		}
	}
}

// WithRouteMapper adds a route attribute to the counters, computed by
// mapRoute from the event's route, which is the raw request path without
// its query (such as "/v1/charges/ch_123/refunds"). Every distinct value
// it returns is a time series per outcome and method, so it must map paths
// to a small, fixed set: route templates such as "/v1/charges/{id}/refunds",
// and a constant such as "other" for anything else. Default: no route
// attribute.
func WithRouteMapper(mapRoute func(route string) string) Option {
	return func(o *options) { o.route = mapRoute }
}

// WithoutSpanEvents stops OnEvent from adding events and attributes to the
// active span. Default: spans that are recording get them.
func WithoutSpanEvents() Option {
	return func(o *options) { o.noSpans = true }
}
