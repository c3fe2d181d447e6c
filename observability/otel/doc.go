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
// Each event is counted by one of three counters, so that no sum over a
// counter counts a request twice: [DecisionsName] (one per guarded
// request), [HandlerOutcomesName] (one per handler that ran) and
// [LeaseEventsName] (the events of running handlers' leases). Their
// attribute idemkit.event is the event kind; on the handler outcomes,
// idemkit.reason says why a response was not stored. [StoreDurationName]
// times each store call alone, by call and result, and
// [HandlerDurationName] how long requests whose handler ran held their
// key, with buckets up to the lease ([WithLease]); [InFlightName] counts
// the handlers running. [WithMemoryStore] adds gauges of a memory store's
// records against its bound, and counters of its purges. The request's
// method and route are http.request.method and http.route, as in
// OpenTelemetry's HTTP conventions.
//
// docs/operations.md lists every instrument with its type, unit,
// attributes and the name a Prometheus scrape shows (dots become
// underscores, a unit in seconds adds _seconds, counters end in _total:
// idemkit_decisions_total, idemkit_store_duration_seconds_bucket), and the
// alerts built on them.
//
// idemkit.event is the event kind (first, takeover, replay, conflict,
// mismatch, key-missing, key-invalid, too-large, body-unreadable,
// store-error, stored, not-stored, lease-lost, renew-error, store-full,
// client-gone, unprotected, renewed); idemkit.reason is set on not-stored
// only (status, too-large, streamed, panic, lock-lost, store-error,
// incomplete, timeout-inside, failed).
//
// Every series of the three counters, and the in-flight gauge's, exists at
// zero before its first event: New creates those of the guarded methods
// ([WithMethods]), and the first event of another method or route creates
// its own. A series that appeared at its first event with the value 1
// would show no increase to rate(), and an alert on a single event (a
// lost lease) would miss the first of a process.
//
// The route attribute is off by default: an event's route is the raw
// request path, and paths holding ids would create one time series per
// resource. [WithRouteMapper] adds it, mapped to a bounded set of values.
//
// # Traces
//
// Each event is also added to the span in the event's context, if it is
// recording, as a span event named "idempotency.<event>" with the key's
// hash (never the key), the status and the reason. Decisions set the
// span attributes idempotency.outcome and idempotency.key_hash. A store
// error is recorded as an exception, and the span's status is set to
// Error where the request failed or ran unprotected (store-error,
// unprotected, a response not stored for a store error or a timeout
// inside idemkit, a failed release, lease-lost); a renew-error alone,
// which the next renewal may mend, leaves it. The events of a lease
// arrive with the request's context, so they reach its span.
package idemotel
