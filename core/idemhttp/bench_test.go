package idemhttp_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
	"github.com/idemkit/idemkit/internal/benchkit"
)

// The benchmarks compare each idemkit path with the same handler alone, in
// the same run, so the ratio is what counts, not the machine.
//
//	go test -run XXX -bench . -benchmem ./core/idemhttp/

// createCharge decodes the body and writes a ~150-byte 201 JSON response,
// like a typical create endpoint.
var createCharge = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	var req benchkit.Charge
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/charges/ch_1")
	w.WriteHeader(http.StatusCreated)
	body, _ := json.Marshal(req.Result())
	w.Write(body)
})

func BenchmarkMiddleware(b *testing.B) {
	benchkit.HTTP(b, func(e *idem.Engine) http.Handler {
		if e == nil {
			return createCharge
		}
		return idemhttp.Middleware(e)(createCharge)
	})
}

func BenchmarkConflict(b *testing.B) {
	store := memstore.New(memstore.WithPurgeInterval(0))
	defer store.Close()
	e := idem.New(idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	key := []byte(`"held"`)
	held := make(chan struct{})
	release := make(chan struct{})
	h := idemhttp.Middleware(e)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case held <- struct{}{}:
			<-release
		default:
		}
		createCharge(w, r)
	}))
	go benchkit.Serve(h, key, benchkit.NewWriter())
	<-held
	defer close(release)
	w := benchkit.NewWriter()
	b.ReportAllocs()
	for b.Loop() {
		w.Reset()
		benchkit.Serve(h, key, w)
		if w.Status != http.StatusConflict {
			b.Fatalf("status %d", w.Status)
		}
	}
}
