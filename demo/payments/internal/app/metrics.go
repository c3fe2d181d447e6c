package app

import (
	"context"
	"net/http"

	"github.com/idemkit/idemkit/core/idemevent"
	idemotel "github.com/idemkit/idemkit/observability/otel"
)

// metrics turns the engine's events into OpenTelemetry metrics served in
// the Prometheus format at /metrics.
type metrics struct {
	prom    *idemotel.Prometheus
	onEvent func(context.Context, idemevent.Event)
	handler http.Handler
}

func newMetrics() (*metrics, error) {
	prom, err := idemotel.NewPrometheus()
	if err != nil {
		return nil, err
	}
	// The API guards POST, and the provider's events run as jobs
	// (Engine.Do): their series start at zero, so that the first lost
	// lease of a process pages.
	m, err := idemotel.New(idemotel.WithMeterProvider(prom.MeterProvider), idemotel.WithMethods("POST", "JOB"))
	if err != nil {
		return nil, err
	}
	return &metrics{prom: prom, onEvent: m.OnEvent, handler: prom.Handler()}, nil
}
