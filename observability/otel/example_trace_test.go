package idemotel_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
	idemotel "github.com/idemkit/idemkit/observability/otel"
)

// outageStore is a memory store that can be taken down.
type outageStore struct {
	*memstore.Store
	down atomic.Bool
}

func (s *outageStore) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	if s.down.Load() {
		return idem.Record{}, 0, errors.New("dial tcp 10.0.0.7:6379: connection refused")
	}
	return s.Store.Acquire(ctx, a)
}

// Each request's span gets an event per idempotency event, the decision
// as its attribute idempotency.outcome, and the status Error when the
// store failed it. The tracing middleware runs before idemkit's, so that
// the request's context carries its span.
func ExampleMetrics_OnEvent_tracing() {
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer tp.Shutdown(context.Background())
	tracer := tp.Tracer("example")

	m, err := idemotel.New(idemotel.WithMeterProvider(noop.NewMeterProvider())) // spans only, here
	if err != nil {
		panic(err)
	}
	store := &outageStore{Store: memstore.New()}
	defer store.Close()
	engine := idem.New(idem.Config{Store: store, OnEvent: m.OnEvent})

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})
	traced := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, span := tracer.Start(r.Context(), r.Method+" "+r.URL.Path)
			defer span.End()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	srv := httptest.NewServer(traced(idemhttp.Middleware(engine)(mux)))
	defer srv.Close()

	post := func(key string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
	}
	post(`"order-1"`) // runs the handler
	post(`"order-1"`) // its retry: replayed
	store.down.Store(true)
	post(`"order-2"`) // the store is down: 503

	for _, span := range exporter.GetSpans() {
		var events []string
		for _, e := range span.Events {
			events = append(events, e.Name)
		}
		fmt.Printf("%s: %s %v\n", span.Name, span.Status.Code, events)
	}
	// Output:
	// POST /v1/charges: Unset [idempotency.first idempotency.stored]
	// POST /v1/charges: Unset [idempotency.replay]
	// POST /v1/charges: Error [idempotency.store-error exception]
}
