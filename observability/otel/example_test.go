package idemotel_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
	idemotel "github.com/idemkit/idemkit/observability/otel"
)

func ExampleNewPrometheus() {
	prom, err := idemotel.NewPrometheus()
	if err != nil {
		panic(err)
	}
	m, err := idemotel.New(idemotel.WithMeterProvider(prom.MeterProvider))
	if err != nil {
		panic(err)
	}
	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store, OnEvent: m.OnEvent})

	mux := http.NewServeMux()
	mux.Handle("GET /metrics", prom.Handler())
	mux.HandleFunc("POST /v1/charges", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})
	srv := httptest.NewServer(idemhttp.Middleware(engine)(mux))
	defer srv.Close()

	for range 2 { // a request and its retry
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", `"order-1"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
	}

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	// Every series of the guarded methods is there from the start, at
	// zero, so that an alert sees its first event as an increase: print
	// those that counted something.
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		counter := strings.HasPrefix(lines.Text(), "idemkit_decisions_total") || strings.HasPrefix(lines.Text(), "idemkit_handler_outcomes_total")
		if counter && !strings.HasSuffix(lines.Text(), " 0") {
			fmt.Println(lines.Text())
		}
	}
	// Output:
	// idemkit_decisions_total{http_request_method="POST",idemkit_event="first"} 1
	// idemkit_decisions_total{http_request_method="POST",idemkit_event="replay"} 1
	// idemkit_handler_outcomes_total{http_request_method="POST",idemkit_event="stored"} 1
}
