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
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

// The benchmarks compare each idemkit path with the same handler alone, in
// the same run, so the ratio is what counts, not the machine.
//
//	go test -run XXX -bench . -benchmem ./core/idemhttp/

// createCharge decodes the body and writes a ~150-byte 201 JSON response,
// like a typical create endpoint.
var createCharge = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	var req idemtest.BenchCharge
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
			prepare: func(h http.Handler) { serve(h, fixedKey(0, nil), idemtest.NewBenchWriter()) }},
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
			w := idemtest.NewBenchWriter()
			var keyBuf []byte
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				var key []byte
				if c.key != nil {
					keyBuf = c.key(i, keyBuf)
					key = keyBuf
				}
				w.Reset()
				serve(h, key, w)
				if w.Status != c.status {
					b.Fatalf("status %d, want %d", w.Status, c.status)
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
	go serve(h, key, idemtest.NewBenchWriter())
	<-held
	defer close(release)
	w := idemtest.NewBenchWriter()
	b.ReportAllocs()
	for b.Loop() {
		w.Reset()
		serve(h, key, w)
		if w.Status != http.StatusConflict {
			b.Fatalf("status %d", w.Status)
		}
	}
}

func serve(h http.Handler, key []byte, w http.ResponseWriter) {
	r := &http.Request{
		Method:        http.MethodPost,
		RequestURI:    "/v1/charges",
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(idemtest.BenchBody)),
		ContentLength: int64(len(idemtest.BenchBody)),
	}
	if key != nil {
		r.Header["Idempotency-Key"] = []string{string(key)}
	}
	h.ServeHTTP(w, r)
}
