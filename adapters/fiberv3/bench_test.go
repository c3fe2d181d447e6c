package idemfiber_test

import (
	"log/slog"
	"testing"

	"github.com/gofiber/fiber/v3"
	"github.com/valyala/fasthttp"

	idemfiber "github.com/idemkit/idemkit/adapters/fiberv3"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
	"github.com/idemkit/idemkit/internal/benchkit"
)

// The benchmarks compare each idemkit path with the same handler alone, in
// the same run, so the ratio is what counts, not the machine. They call
// app.Handler() on one reused fasthttp.RequestCtx, as a keep-alive
// connection does, leaving out the network and app.Test's overhead.
//
//	go test -run XXX -bench . -benchmem ./adapters/fiberv3/

// createCharge binds the body and answers a ~150-byte 201 JSON response,
// like a typical create endpoint.
func createCharge(c fiber.Ctx) error {
	var req benchkit.Charge
	if err := c.Bind().Body(&req); err != nil {
		return fiber.NewError(fiber.StatusBadRequest, err.Error())
	}
	c.Set(fiber.HeaderLocation, "/v1/charges/ch_1")
	return c.Status(fiber.StatusCreated).JSON(req.Result())
}

// benchApp serves h, behind idemkit for e when e is not nil.
func benchApp(b *testing.B, e *idem.Engine, h fiber.Handler) fasthttp.RequestHandler {
	app := fiber.New()
	if e != nil {
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
	req.SetBody(benchkit.Body)
	fctx.Response.Reset()
	h(fctx)
}

func BenchmarkMiddleware(b *testing.B) {
	benchkit.Cases(b, func(b *testing.B, e *idem.Engine) func(key []byte) int {
		h := benchApp(b, e, createCharge)
		var fctx fasthttp.RequestCtx
		return func(key []byte) int {
			serve(h, &fctx, key)
			return fctx.Response.StatusCode()
		}
	})
}

// BenchmarkConflict measures the 409 path: the key is held by a request
// whose handler is still running.
func BenchmarkConflict(b *testing.B) {
	held := make(chan struct{})
	release := make(chan struct{})
	store := memstore.New(memstore.WithPurgeInterval(0))
	b.Cleanup(func() { _ = store.Close() })
	e := idem.New(idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	h := benchApp(b, e, func(c fiber.Ctx) error {
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
