// Command metrics is the operations page's metrics set-up: idemkit's
// events counted as OpenTelemetry metrics and served to Prometheus at
// /metrics, with the route label folded into the API's few routes.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"strings"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
	idemotel "github.com/idemkit/idemkit/observability/otel"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()

	store := memstore.New()
	defer store.Close()

	prom, err := idemotel.NewPrometheus() // a MeterProvider on a registry of its own
	if err != nil {
		log.Fatal(err)
	}
	m, err := idemotel.New(idemotel.WithMeterProvider(prom.MeterProvider), idemotel.WithRouteMapper(route),
		idemotel.WithMemoryStore(store)) // gauges of the memory store's records against its bound
	if err != nil {
		log.Fatal(err)
	}
	engine := idem.New(idem.Config{Store: store, OnEvent: m.OnEvent})

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", createCharge)
	mux.HandleFunc("POST /v1/charges/{id}/capture", captureCharge)
	mux.Handle("GET /metrics", prom.Handler()) // GET is not guarded: it passes through
	log.Fatal(http.ListenAndServe(*addr, idemhttp.Middleware(engine)(mux)))
}

// route folds a request path into one of the API's routes, so that the
// route label takes a handful of values, not one per charge.
func route(path string) string {
	switch {
	case path == "/v1/charges":
		return "/v1/charges"
	case strings.HasPrefix(path, "/v1/charges/") && strings.HasSuffix(path, "/capture"):
		return "/v1/charges/{id}/capture"
	}
	return "other"
}

func createCharge(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintln(w, `{"id":"ch_1","status":"authorized"}`)
}

func captureCharge(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":%q,"status":"captured"}`+"\n", r.PathValue("id"))
}
