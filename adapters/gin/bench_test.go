package idemgin_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idemkit/adapters/gin"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
)

// The benchmarks compare each idemkit path with the same Gin handler alone,
// in the same run, so the ratio is what counts, not the machine.
//
//	go test -run XXX -bench . -benchmem ./adapters/gin/

// benchBody is a ~100-byte charge request.
var benchBody = []byte(`{"amount":1999,"currency":"usd","customer":"cus_8f3a","description":"Order #1234 for two items"}`)

type chargeRequest struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Customer    string `json:"customer"`
	Description string `json:"description"`
}

type chargeResponse struct {
	ID       string `json:"id"`
	Object   string `json:"object"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	Customer string `json:"customer"`
	Status   string `json:"status"`
	Created  string `json:"created"`
}

// createCharge binds the body and writes a ~150-byte 201 JSON response,
// like a typical create endpoint.
func createCharge(c *gin.Context) {
	var req chargeRequest
	if err := c.ShouldBindJSON(&req); err != nil {
		c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
		return
	}
	c.Header("Location", "/v1/charges/ch_1")
	c.JSON(http.StatusCreated, chargeResponse{"ch_3MmlLrLkdIwHu7ix0snN0B15", "charge",
		req.Amount, req.Currency, req.Customer, "succeeded", "2026-11-22T13:21:41Z"})
}

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

func BenchmarkMiddleware(b *testing.B) {
	gin.SetMode(gin.ReleaseMode)
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
		prepare bool                           // serve the fixed key once before the timer
		status  int
	}{
		{name: "HandlerAlone", key: uniqueKey, status: 201},
		{name: "FirstRequest", wrap: true, key: uniqueKey, status: 201},
		{name: "Replay", wrap: true, key: fixedKey, prepare: true, status: 201},
		{name: "NoKey", wrap: true, status: 400},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			r := gin.New()
			if c.wrap {
				store := memstore.New(memstore.WithMaxRecords(1<<30), memstore.WithPurgeInterval(0))
				defer store.Close()
				e := idem.New(idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
				r.Use(idemgin.Middleware(e))
			}
			r.POST("/v1/charges", createCharge)
			if c.prepare {
				serve(r, fixedKey(0, nil), &benchWriter{h: http.Header{}})
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
				serve(r, key, w)
				if w.status != c.status {
					b.Fatalf("status %d, want %d", w.status, c.status)
				}
			}
		})
	}
}

var benchURL = &url.URL{Path: "/v1/charges"}

func serve(h http.Handler, key []byte, w http.ResponseWriter) {
	r := &http.Request{
		Method:        http.MethodPost,
		URL:           benchURL,
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
