package idemotel

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// Prometheus is an OpenTelemetry MeterProvider whose metrics are read by a
// Prometheus registry of its own, and the handler that serves that registry.
type Prometheus struct {
	// MeterProvider feeds Registry: pass it to New with WithMeterProvider,
	// and to any other instrumentation to expose on the same endpoint.
	MeterProvider *sdkmetric.MeterProvider
	// Registry is created for this Prometheus alone; register other
	// collectors (such as collectors.NewGoCollector) on it to serve them too.
	Registry *prometheus.Registry

	handler http.Handler
}

// NewPrometheus builds a MeterProvider (with opts, such as
// sdkmetric.WithResource) exporting to a new prometheus.Registry. Nothing
// is registered with the global Prometheus registry nor set as the global
// MeterProvider. Names follow Prometheus conventions: dots become
// underscores, the unit is appended (_seconds) and counters end in _total;
// instrumentation scope labels are left out.
func NewPrometheus(opts ...sdkmetric.Option) (*Prometheus, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, err
	}
	opts = append(opts[:len(opts):len(opts)], sdkmetric.WithReader(exporter))
	return &Prometheus{
		MeterProvider: sdkmetric.NewMeterProvider(opts...),
		Registry:      reg,
		handler:       promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
	}, nil
}

// Handler serves the metrics in the Prometheus exposition format; mount it
// at GET /metrics.
func (p *Prometheus) Handler() http.Handler { return p.handler }

// Shutdown stops the MeterProvider; the handler serves nothing new after it.
func (p *Prometheus) Shutdown(ctx context.Context) error { return p.MeterProvider.Shutdown(ctx) }
