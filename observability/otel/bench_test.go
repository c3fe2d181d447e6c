package idemotel_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idemkit/core/idemevent"
	idemotel "github.com/idemkit/idemkit/observability/otel"
)

// BenchmarkOnEvent measures the cost OnEvent adds to each request: a first
// and a stored event, as a request that runs its handler yields.
func BenchmarkOnEvent(b *testing.B) {
	first := idemevent.Event{Kind: idemevent.First, Method: "POST", Route: "/v1/charges", StoreCall: "acquire", StoreLatency: time.Microsecond}
	stored := idemevent.Event{Kind: idemevent.Stored, Method: "POST", Route: "/v1/charges", Status: 201, StoreCall: "complete", StoreLatency: time.Microsecond, Duration: time.Millisecond}
	bench := func(b *testing.B, ctx context.Context, opts ...idemotel.Option) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
		m, err := idemotel.New(append(opts, idemotel.WithMeterProvider(mp))...)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			m.OnEvent(ctx, first)
			m.OnEvent(ctx, stored)
		}
	}
	b.Run("metrics", func(b *testing.B) { bench(b, context.Background()) })
	b.Run("metrics+route", func(b *testing.B) {
		bench(b, context.Background(), idemotel.WithRouteMapper(func(string) string { return "/v1/charges" }))
	})
	b.Run("metrics+recording span", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider()
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		ctx, span := tp.Tracer("bench").Start(context.Background(), "request")
		defer span.End()
		bench(b, ctx)
	})
}
