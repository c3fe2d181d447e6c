package idemotel_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
	idemotel "github.com/idemkit/idemkit/observability/otel"
)

// scrape reads the server's /metrics.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// sample sums the values of family name's samples whose labels include want.
func sample(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f, ok := fams[name]
	if !ok {
		return 0
	}
	var sum float64
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

// TestPrometheusScrape drives a scripted sequence through the net/http
// adapter and checks, on GET /metrics, that each counter moved by exactly
// what happened.
func TestPrometheusScrape(t *testing.T) {
	prom, err := idemotel.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prom.Shutdown(t.Context()) })
	m, err := idemotel.New(idemotel.WithMeterProvider(prom.MeterProvider))
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	engine := idem.New(idem.Config{Store: store, OnEvent: m.OnEvent, Logger: slog.New(slog.DiscardHandler)})

	entered, release := make(chan struct{}), make(chan struct{})
	var holding atomic.Bool
	holding.Store(true)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", prom.Handler())
	mux.HandleFunc("POST /v1/charges", func(w http.ResponseWriter, r *http.Request) {
		if holding.CompareAndSwap(true, false) {
			close(entered)
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ch_1"}`)
	})
	srv := httptest.NewServer(idemhttp.Middleware(engine)(mux))
	t.Cleanup(srv.Close)

	post := func(key, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return nil
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	expectStatus := func(resp *http.Response, want int) {
		t.Helper()
		if resp != nil && resp.StatusCode != want {
			t.Fatalf("status %d, want %d", resp.StatusCode, want)
		}
	}

	before := scrape(t, srv.URL)

	// first: its handler holds until the conflict has been seen.
	firstDone := make(chan *http.Response)
	go func() { firstDone <- post(`"k-1"`, `{"amount":1}`) }()
	<-entered
	expectStatus(post(`"k-1"`, `{"amount":1}`), http.StatusConflict)
	during := scrape(t, srv.URL)
	close(release)
	expectStatus(<-firstDone, http.StatusCreated)
	expectStatus(post(`"k-1"`, `{"amount":1}`), http.StatusCreated) // replay
	expectStatus(post(`"k-1"`, `{"amount":2}`), http.StatusUnprocessableEntity)
	expectStatus(post(`"bad key`, `{"amount":3}`), http.StatusBadRequest)

	after := scrape(t, srv.URL)

	const decisions, outcomes = "idemkit_decisions_total", "idemkit_handler_outcomes_total"
	want := map[string]float64{"first": 1, "conflict": 1, "replay": 1, "mismatch": 1, "key-invalid": 1}
	for _, k := range idemtest.EventKinds() {
		if !k.IsDecision() {
			continue
		}
		labels := map[string]string{"idemkit_event": k.String()}
		if got := sample(after, decisions, labels) - sample(before, decisions, labels); got != want[k.String()] {
			t.Errorf("%s{idemkit_event=%q} moved by %v, want %v", decisions, k, got, want[k.String()])
		}
	}
	if got := sample(after, decisions, nil) - sample(before, decisions, nil); got != 5 {
		t.Errorf("%s moved by %v in all, want the 5 requests", decisions, got)
	}
	if got := sample(after, decisions, map[string]string{"idemkit_event": "first", "http_request_method": "POST"}); got != 1 {
		t.Errorf(`%s{idemkit_event="first",http_request_method="POST"} = %v, want 1`, decisions, got)
	}
	if got := sample(after, outcomes, nil) - sample(before, outcomes, nil); got != 1 ||
		sample(after, outcomes, map[string]string{"idemkit_event": "stored"}) != 1 {
		t.Errorf("%s moved by %v, want the one stored", outcomes, got)
	}

	const inFlight = "idemkit_in_flight"
	if got := sample(during, inFlight, nil); got != 1 {
		t.Errorf("%s = %v while the first request ran, want 1", inFlight, got)
	}
	if got := sample(after, inFlight, nil); got != 0 {
		t.Errorf("%s = %v at the end, want 0", inFlight, got)
	}

	// One acquire behind each decision but the invalid key's, and one
	// completion.
	const storeDuration = "idemkit_store_duration_seconds"
	for call, n := range map[string]float64{"acquire": 4, "complete": 1, "release": 0, "renew": 0} {
		labels := map[string]string{"idemkit_store_call": call, "idemkit_store_result": "ok"}
		if got := sample(after, storeDuration, labels) - sample(before, storeDuration, labels); got != n {
			t.Errorf("%s{idemkit_store_call=%q} count moved by %v, want %v", storeDuration, call, got, n)
		}
	}
	const handlerDuration = "idemkit_handler_duration_seconds"
	if got := sample(after, handlerDuration, nil); got != 1 {
		t.Errorf("%s count %v, want the one handler", handlerDuration, got)
	}

	types := map[string]dto.MetricType{decisions: dto.MetricType_COUNTER, outcomes: dto.MetricType_COUNTER,
		storeDuration: dto.MetricType_HISTOGRAM, handlerDuration: dto.MetricType_HISTOGRAM, inFlight: dto.MetricType_GAUGE}
	for name, typ := range types {
		f, ok := after[name]
		if !ok {
			t.Errorf("%s is not exposed; exposed: %v", name, familyNames(after))
			continue
		}
		if f.GetType() != typ {
			t.Errorf("%s has type %v, want %v", name, f.GetType(), typ)
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if strings.HasPrefix(l.GetName(), "otel_scope") || l.GetName() == "http_route" {
					t.Errorf("%s has label %s, want none such", name, l.GetName())
				}
			}
		}
	}
}

func familyNames(fams map[string]*dto.MetricFamily) []string {
	var names []string
	for n := range fams {
		names = append(names, n)
	}
	return names
}

// TestPrometheusRegistriesIndependent: two Prometheus exporters in one
// process (two engines, or parallel tests) do not collide, and neither
// touches the global registry.
func TestPrometheusRegistriesIndependent(t *testing.T) {
	var handlers []http.Handler
	for i := range 2 {
		prom, err := idemotel.NewPrometheus()
		if err != nil {
			t.Fatalf("exporter %d: %v", i, err)
		}
		t.Cleanup(func() { _ = prom.Shutdown(t.Context()) })
		m, err := idemotel.New(idemotel.WithMeterProvider(prom.MeterProvider))
		if err != nil {
			t.Fatal(err)
		}
		for range i + 1 {
			m.OnEvent(t.Context(), idemevent.Event{Kind: idemevent.First, Method: "POST"})
		}
		handlers = append(handlers, prom.Handler())
	}
	for i, h := range handlers {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		line := fmt.Sprintf(`idemkit_decisions_total{http_request_method="POST",idemkit_event="first"} %d`, i+1)
		if !strings.Contains(rec.Body.String(), line) {
			t.Errorf("exporter %d does not show %s:\n%s", i, line, rec.Body.String())
		}
	}
}
