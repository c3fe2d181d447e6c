package fibertest

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/valyala/fasthttp"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
	"github.com/idemkit/idemkit/internal/benchkit"
)

// The benchmarks compare each idemkit path with the same handler alone, in
// the same run, so the ratio is what counts, not the machine. They call
// app.Handler() on one reused fasthttp.RequestCtx, as a keep-alive
// connection does, leaving out the network and app.Test's overhead.

// createCharge binds the body and answers a ~150-byte 201 JSON response,
// like a typical create endpoint.
func (s *suite[C, O]) createCharge(c C) error {
	var req benchkit.Charge
	if err := s.a.Bind(c, &req); err != nil {
		return s.a.NewError(http.StatusBadRequest, err.Error())
	}
	c.Set("Location", "/v1/charges/ch_1")
	return status(c, http.StatusCreated).JSON(req.Result())
}

// benchApp serves h, behind idemkit for e when e is not nil.
func (s *suite[C, O]) benchApp(e *idem.Engine, h func(C) error) fasthttp.RequestHandler {
	app := s.a.NewApp(Config[C]{})
	if e != nil {
		app.Use(s.a.New(e))
	}
	app.Post("/v1/charges", h)
	return app.Handler()
}

// serve sends one charge request on fctx; key nil sends no key.
func serve(h fasthttp.RequestHandler, fctx *fasthttp.RequestCtx, key []byte) {
	req := &fctx.Request
	req.Header.SetMethod(http.MethodPost)
	req.Header.SetRequestURI("/v1/charges")
	req.Header.SetContentType("application/json")
	if key != nil {
		req.Header.SetBytesV(idem.DefaultHeaderName, key)
	}
	req.SetBody(benchkit.Body)
	fctx.Response.Reset()
	h(fctx)
}

// BenchmarkMiddleware measures benchkit's cases (the handler alone, a
// first request, a replay, a request without a key) on a's Fiber.
func BenchmarkMiddleware[C Ctx, O any](b *testing.B, a *Adapter[C, O]) {
	s := &suite[C, O]{a}
	benchkit.Cases(b, func(b *testing.B, e *idem.Engine) func(key []byte) int {
		h := s.benchApp(e, s.createCharge)
		var fctx fasthttp.RequestCtx
		return func(key []byte) int {
			serve(h, &fctx, key)
			return fctx.Response.StatusCode()
		}
	})
}

// BenchmarkConflict measures the 409 path: the key is held by a request
// whose handler is still running.
func BenchmarkConflict[C Ctx, O any](b *testing.B, a *Adapter[C, O]) {
	s := &suite[C, O]{a}
	held := make(chan struct{})
	release := make(chan struct{})
	store := memstore.New(memstore.WithPurgeInterval(0))
	b.Cleanup(func() { _ = store.Close() })
	e := idem.New(idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	h := s.benchApp(e, func(c C) error {
		select {
		case held <- struct{}{}:
			<-release
		default:
		}
		return s.createCharge(c)
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
		if got := fctx.Response.StatusCode(); got != http.StatusConflict {
			b.Fatalf("status %d", got)
		}
	}
}
