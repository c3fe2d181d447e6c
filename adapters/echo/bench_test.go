package idemecho_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	idemecho "github.com/idemkit/idemkit/adapters/echo"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
	"github.com/labstack/echo/v4"
)

// The benchmarks compare each idemkit path with the same Echo handler alone,
// in the same run, so the ratio is what counts, not the machine.
//
//	go test -run XXX -bench . -benchmem ./adapters/echo/

// createCharge binds the body and writes a ~150-byte 201 JSON response,
// like a typical create endpoint.
func createCharge(c echo.Context) error {
	var req idemtest.BenchCharge
	if err := c.Bind(&req); err != nil {
		return err
	}
	c.Response().Header().Set("Location", "/v1/charges/ch_1")
	return c.JSON(http.StatusCreated, req.Result())
}

func BenchmarkMiddleware(b *testing.B) {
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
			ec := echo.New()
			if c.wrap {
				store := memstore.New(memstore.WithMaxRecords(1<<30), memstore.WithPurgeInterval(0))
				defer store.Close()
				e := idem.New(idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
				ec.Use(idemecho.Middleware(e))
			}
			ec.POST("/v1/charges", createCharge)
			if c.prepare {
				serve(ec, fixedKey(0, nil), idemtest.NewBenchWriter())
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
				serve(ec, key, w)
				if w.Status != c.status {
					b.Fatalf("status %d, want %d", w.Status, c.status)
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
		Body:          io.NopCloser(bytes.NewReader(idemtest.BenchBody)),
		ContentLength: int64(len(idemtest.BenchBody)),
	}
	if key != nil {
		r.Header["Idempotency-Key"] = []string{string(key)}
	}
	h.ServeHTTP(w, r)
}
