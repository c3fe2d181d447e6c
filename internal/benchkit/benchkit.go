// Package benchkit is the benchmark fixture that the net/http middleware and
// every adapter share, so that their handler-alone baselines, and so their
// ratios, are comparable: a ~100-byte charge request decoded by the handler,
// and a ~150-byte 201 response.
//
// It is internal: benchmarks are not part of idemkit's API, so the fixture
// can change with them. Go's internal rule goes by import path, so the
// adapter modules under github.com/idemkit/idemkit/ may import it.
package benchkit

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
)

// Body is the request body of the benchmarks.
var Body = []byte(`{"amount":1999,"currency":"usd","customer":"cus_8f3a","description":"Order #1234 for two items"}`)

// Charge is Body decoded.
type Charge struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Customer    string `json:"customer"`
	Description string `json:"description"`
}

// ChargeResult is the benchmark handler's response body.
type ChargeResult struct {
	ID       string `json:"id"`
	Object   string `json:"object"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Customer string `json:"customer"`
	Status   string `json:"status"`
	Created  string `json:"created"`
}

// Result is the response the benchmark handler writes for c.
func (c Charge) Result() ChargeResult {
	return ChargeResult{"ch_3MmlLrLkdIwHu7ix0snN0B15", "charge", c.Amount, c.Currency, c.Customer,
		"succeeded", "2026-11-22T13:21:41Z"}
}

// Writer is a reusable http.ResponseWriter, so that benchmarks measure
// the middleware and the handler rather than a recorder's allocations.
type Writer struct {
	H      http.Header
	Status int
	N      int
}

// NewWriter returns an empty Writer.
func NewWriter() *Writer { return &Writer{H: http.Header{}} }

// Header implements http.ResponseWriter.
func (w *Writer) Header() http.Header { return w.H }

// WriteHeader implements http.ResponseWriter.
func (w *Writer) WriteHeader(code int) {
	if w.Status == 0 {
		w.Status = code
	}
}

// Write implements http.ResponseWriter.
func (w *Writer) Write(p []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	w.N += len(p)
	return len(p), nil
}

// Reset empties w for the next request.
func (w *Writer) Reset() {
	clear(w.H)
	w.Status, w.N = 0, 0
}

// Cases runs the benchmark cases every adapter reports, as
// sub-benchmarks of b: HandlerAlone (newServe(nil), the baseline),
// FirstRequest (a new key each time), Replay and NoKey (the 400), the
// others with newServe(e) for an Engine on a memory store that grows as
// real traffic would make it. newServe returns a function that sends one
// benchmark request (key nil: no key header) to the benchmark handler
// (decode Body, answer Charge.Result with 201), wrapped in the
// adapter's middleware for e when e is not nil, and returns its status.
func Cases(b *testing.B, newServe func(b *testing.B, e *idem.Engine) func(key []byte) int) {
	fixedKey := func(int, []byte) []byte { return []byte(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`) }
	uniqueKey := func(i int, buf []byte) []byte {
		buf = append(buf[:0], `"bench-`...)
		buf = strconv.AppendInt(buf, int64(i), 10)
		return append(buf, '"')
	}
	cases := []struct {
		name    string
		wrap    bool
		key     func(i int, buf []byte) []byte // nil: no key header
		prepare bool                           // send the fixed key once before the timer
		status  int
	}{
		{name: "HandlerAlone", key: uniqueKey, status: 201},
		{name: "FirstRequest", wrap: true, key: uniqueKey, status: 201},
		{name: "Replay", wrap: true, key: fixedKey, prepare: true, status: 201},
		{name: "NoKey", wrap: true, status: 400},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var e *idem.Engine
			if c.wrap {
				store := memstore.New(memstore.WithMaxRecords(1<<30), memstore.WithPurgeInterval(0))
				b.Cleanup(func() { store.Close() })
				e = idem.New(idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
			}
			send := newServe(b, e)
			if c.prepare {
				send(fixedKey(0, nil))
			}
			var keyBuf []byte
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				var key []byte
				if c.key != nil {
					keyBuf = c.key(i, keyBuf)
					key = keyBuf
				}
				if status := send(key); status != c.status {
					b.Fatalf("status %d, want %d", status, c.status)
				}
			}
		})
	}
}

// HTTP is Cases for an adapter built on net/http: newHandler
// returns the benchmark handler, wrapped for e when e is not nil.
func HTTP(b *testing.B, newHandler func(e *idem.Engine) http.Handler) {
	Cases(b, func(_ *testing.B, e *idem.Engine) func(key []byte) int {
		h, w := newHandler(e), NewWriter()
		return func(key []byte) int {
			w.Reset()
			Serve(h, key, w)
			return w.Status
		}
	})
}

var benchURL = &url.URL{Path: "/v1/charges"}

// Serve sends h one benchmark request, with the key header if key is
// not nil.
func Serve(h http.Handler, key []byte, w http.ResponseWriter) {
	r := &http.Request{
		Method:        http.MethodPost,
		URL:           benchURL,
		RequestURI:    "/v1/charges",
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(Body)),
		ContentLength: int64(len(Body)),
	}
	if key != nil {
		r.Header[idem.DefaultHeaderName] = []string{string(key)}
	}
	h.ServeHTTP(w, r)
}
