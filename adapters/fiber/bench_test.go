package idemfiber_test

import (
	"log/slog"
	"strconv"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	idemfiber "github.com/idemkit/idemkit/adapters/fiber"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

// The benchmarks compare each idemkit path with the same handler alone, in
// the same run, so the ratio is what counts, not the machine. They call
// app.Handler() on one reused fasthttp.RequestCtx, as a keep-alive
// connection does, leaving out the network and app.Test's overhead.
//
//	go test -run XXX -bench . -benchmem ./adapters/fiber/

// createCharge binds the body and answers a ~150-byte 201 JSON response,
// like a typical create endpoint.
func createCharge(c *fiber.Ctx) error {
	var req idemtest.BenchCharge
	if err := c.BodyParser(&req); err != nil {
		return fiber.NewError(fiber.StatusBadRequest, err.Error())
	}
	c.Set(fiber.HeaderLocation, "/v1/charges/ch_1")
	return c.Status(fiber.StatusCreated).JSON(req.Result())
}

func benchApp(b *testing.B, wrap bool, h fiber.Handler) fasthttp.RequestHandler {
	app := fiber.New()
	if wrap {
		store := memstore.New(memstore.WithMaxRecords(1<<30), memstore.WithPurgeInterval(0))
		b.Cleanup(func() { _ = store.Close() })
		e := idem.New(idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
		app.Use(idemfiber.New(e))
	}
	app.Post("/v1/charges", h)
	return app.Handler()
}

// serve sends one charge request on fctx; key nil sends no key.
func serve(h fasthttp.RequestHandler, fctx *fasthttp.RequestCtx, key []byte) {
	req := &fctx.Request
	req.Header.SetMethod(fiber.MethodPost)
	req.Header.SetRequestURI("/v1/charges")
	req.Header.SetContentType(fiber.MIMEApplicationJSON)
	if key != nil {
		req.Header.SetBytesV(idem.DefaultHeaderName, key)
	}
	req.SetBody(idemtest.BenchBody)
	fctx.Response.Reset()
	h(fctx)
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
		prepare bool                           // send the key once before the timer
		status  int
	}{
		{name: "HandlerAlone", key: uniqueKey, status: 201},
		{name: "FirstRequest", wrap: true, key: uniqueKey, status: 201},
		{name: "Replay", wrap: true, key: fixedKey, prepare: true, status: 201},
		{name: "NoKey", wrap: true, status: 400},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			h := benchApp(b, c.wrap, createCharge)
			var fctx fasthttp.RequestCtx
			if c.prepare {
				serve(h, &fctx, c.key(0, nil))
			}
			var keyBuf []byte
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				var key []byte
				if c.key != nil {
					keyBuf = c.key(i, keyBuf)
					key = keyBuf
				}
				serve(h, &fctx, key)
				if got := fctx.Response.StatusCode(); got != c.status {
					b.Fatalf("status %d, want %d: %s", got, c.status, fctx.Response.Body())
				}
			}
		})
	}
}

// BenchmarkConflict measures the 409 path: the key is held by a request
// whose handler is still running.
func BenchmarkConflict(b *testing.B) {
	held := make(chan struct{})
	release := make(chan struct{})
	h := benchApp(b, true, func(c *fiber.Ctx) error {
		select {
		case held <- struct{}{}:
			<-release
		default:
		}
		return createCharge(c)
	})
	key := []byte(`"held"`)
	done := make(chan struct{})
	go func() {
		defer close(done)
		serve(h, new(fasthttp.RequestCtx), key)
	}()
	<-held
	defer func() { close(release); <-done }()
	var fctx fasthttp.RequestCtx
	b.ReportAllocs()
	for b.Loop() {
		serve(h, &fctx, key)
		if got := fctx.Response.StatusCode(); got != fiber.StatusConflict {
			b.Fatalf("status %d", got)
		}
	}
}
