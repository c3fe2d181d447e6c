package idemhttp_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
)

// The benchmarks compare each idemkit path with the same handler alone, in
// the same run, so the ratio is what counts, not the machine.
//
//	go test -run XXX -bench . -benchmem ./core/idemhttp/

// benchBody is a ~100-byte charge request.
var benchBody = []byte(`{"amount":1999,"currency":"usd","customer":"cus_8f3a","description":"Order #1234 for two items"}`)

type chargeRequest struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Customer    string `json:"customer"`
	Description string `json:"description"`
}

// createCharge decodes the body and writes a ~150-byte 201 JSON response,
// like a typical create endpoint.
var createCharge = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	var req chargeRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/charges/ch_1")
	w.WriteHeader(http.StatusCreated)
	body, _ := json.Marshal(struct {
		ID       string `json:"id"`
		Object   string `json:"object"`
		Amount   int64  `json:"amount"`
		Currency string `json:"currency"`
		Customer string `json:"customer"`
		Status   string `json:"status"`
		Created  string `json:"created"`
	}{"ch_3MmlLrLkdIwHu7ix0snN0B15", "charge", req.Amount, req.Currency, req.Customer, "succeeded", "2026-11-22T13:21:41Z"})
	w.Write(body)
})

// benchWriter is a reusable ResponseWriter, so the benchmark measures the
// middleware and handler rather than a recorder's allocations.
type benchWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) WriteHeader(code int)        { w.status = code }
func (w *benchWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }
func (w *benchWriter) reset() {
	clear(w.h)
	w.status, w.n = 0, 0
}

type benchCase struct {
	name    string
	wrap    bool
	key     func(i int, buf []byte) []byte // nil: no key header
	prepare func(http.Handler)             // runs once before the timer
	status  int
}

func BenchmarkMiddleware(b *testing.B) {
	fixedKey := func(int, []byte) []byte { return []byte(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`) }
	uniqueKey := func(i int, buf []byte) []byte {
		buf = append(buf[:0], `"bench-`...)
		buf = strconv.AppendInt(buf, int64(i), 10)
		return append(buf, '"')
	}
	cases := []benchCase{
		{name: "HandlerAlone", key: uniqueKey, status: 201},
		{name: "FirstRequest", wrap: true, key: uniqueKey, status: 201},
		{name: "Replay", wrap: true, key: fixedKey, status: 201,
			prepare: func(h http.Handler) { serve(h, fixedKey(0, nil), &benchWriter{h: http.Header{}}) }},
		{name: "NoKey", wrap: true, status: 400},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var h http.Handler = createCharge
			if c.wrap {
				store := memstore.New(memstore.WithMaxRecords(1<<30), memstore.WithPurgeInterval(0))
				defer store.Close()
				e := idem.New(idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
				h = idemhttp.Middleware(e)(createCharge)
			}
			if c.prepare != nil {
				c.prepare(h)
			}
			w := &benchWriter{h: http.Header{}}
			var keyBuf []byte
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				var key []byte
				if c.key != nil {
					keyBuf = c.key(i, keyBuf)
					key = keyBuf
				}
				w.reset()
				serve(h, key, w)
				if w.status != c.status {
					b.Fatalf("status %d, want %d", w.status, c.status)
				}
			}
		})
	}
}

// BenchmarkConflict measures the 409 path: the key is held by a request
// whose handler is still running.
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
	go serve(h, key, &benchWriter{h: http.Header{}})
	<-held
	defer close(release)
	w := &benchWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		w.reset()
		serve(h, key, w)
		if w.status != http.StatusConflict {
			b.Fatalf("status %d", w.status)
		}
	}
}

func serve(h http.Handler, key []byte, w http.ResponseWriter) {
	r := &http.Request{
		Method:        http.MethodPost,
		RequestURI:    "/v1/charges",
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(benchBody)),
		ContentLength: int64(len(benchBody)),
	}
	if key != nil {
		r.Header["Idempotency-Key"] = []string{string(key)}
	}
	h.ServeHTTP(w, r)
}
