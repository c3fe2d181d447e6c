package idemtest

import "net/http"

// The benchmark fixture every adapter's benchmarks share, so that their
// handler-alone baselines, and so their ratios, are comparable: a ~100-byte
// charge request decoded by the handler, and a ~150-byte 201 response.

// BenchBody is the request body of the benchmarks.
var BenchBody = []byte(`{"amount":1999,"currency":"usd","customer":"cus_8f3a","description":"Order #1234 for two items"}`)

// BenchCharge is BenchBody decoded.
type BenchCharge struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Customer    string `json:"customer"`
	Description string `json:"description"`
}

// BenchChargeResult is the benchmark handler's response body.
type BenchChargeResult struct {
	ID       string `json:"id"`
	Object   string `json:"object"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Customer string `json:"customer"`
	Status   string `json:"status"`
	Created  string `json:"created"`
}

// Result is the response the benchmark handler writes for c.
func (c BenchCharge) Result() BenchChargeResult {
	return BenchChargeResult{"ch_3MmlLrLkdIwHu7ix0snN0B15", "charge", c.Amount, c.Currency, c.Customer,
		"succeeded", "2026-11-22T13:21:41Z"}
}

// BenchWriter is a reusable http.ResponseWriter, so that benchmarks measure
// the middleware and the handler rather than a recorder's allocations.
type BenchWriter struct {
	H      http.Header
	Status int
	N      int
}

// NewBenchWriter returns an empty BenchWriter.
func NewBenchWriter() *BenchWriter { return &BenchWriter{H: http.Header{}} }

// Header implements http.ResponseWriter.
func (w *BenchWriter) Header() http.Header { return w.H }

// WriteHeader implements http.ResponseWriter.
func (w *BenchWriter) WriteHeader(code int) {
	if w.Status == 0 {
		w.Status = code
	}
}

// Write implements http.ResponseWriter.
func (w *BenchWriter) Write(p []byte) (int, error) {
	if w.Status == 0 {
		w.Status = http.StatusOK
	}
	w.N += len(p)
	return len(p), nil
}

// Reset empties w for the next request.
func (w *BenchWriter) Reset() {
	clear(w.H)
	w.Status, w.N = 0, 0
}
