// Package idemotel turns idemkit's events into OpenTelemetry metrics and
// span events, and can expose the metrics to Prometheus.
//
// Plug [Metrics.OnEvent] into the Engine's Config.OnEvent:
//
//	prom, err := idemotel.NewPrometheus()       // a MeterProvider on a registry of its own
//	if err != nil { ... }
//	m, err := idemotel.New(idemotel.WithMeterProvider(prom.MeterProvider))
//	if err != nil { ... }
//	engine := idem.New(idem.Config{Store: store, OnEvent: m.OnEvent})
//	mux.Handle("GET /metrics", prom.Handler())
//
// Without [NewPrometheus], [New] uses the global MeterProvider, so an
// application that already exports OpenTelemetry metrics (OTLP, Prometheus
// or other) only needs New and OnEvent.
//
// # Metrics
//
// Instrument names are OpenTelemetry's; the Prometheus exporter, as
// configured by NewPrometheus, exposes them as:
//
//	idemkit.events         counter        idemkit_events_total{outcome, method[, reason][, route]}
//	idemkit.store.latency  histogram (s)  idemkit_store_latency_seconds{outcome}  (_bucket, _sum, _count)
//	idemkit.in_flight      up-down counter idemkit_in_flight{method[, route]}
//
// outcome is the event kind (first, takeover, replay, conflict, mismatch,
// key-missing, key-invalid, too-large, body-unreadable, store-error,
// stored, not-stored, lease-lost, renew-error, store-full, client-gone,
// unprotected, renewed); reason is set
// on not-stored only (status, too-large, streamed, panic, lock-lost,
// store-error, incomplete, timeout-inside, failed).
//
// The route attribute is off by default: an event's route is the raw
// request path, and paths holding ids would create one time series per
// resource. [WithRouteMapper] adds it, mapped to a bounded set of values.
//
// # Traces
//
// Each event is also added to the span in the event's context, if it is
// recording, as a span event named "idempotency.<outcome>" with the key's
// hash (never the key), the status and the reason; see [Metrics.OnEvent].
package idemotel
