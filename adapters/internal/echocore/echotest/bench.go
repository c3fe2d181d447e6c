package echotest

import (
	"net/http"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/internal/benchkit"
)

// BenchmarkMiddleware compares each idemkit path with the same Echo
// handler alone, in the same run, so the ratio is what counts, not the
// machine. The handler binds the body and writes a ~150-byte 201 JSON
// response, like a typical create endpoint.
func BenchmarkMiddleware[C Ctx, H ~func(C) error, M ~func(H) H, O any](b *testing.B, a *Adapter[C, H, M, O]) {
	createCharge := func(c C) error {
		var req benchkit.Charge
		if err := c.Bind(&req); err != nil {
			return err
		}
		a.Response(c).Header().Set("Location", "/v1/charges/ch_1")
		return c.JSON(http.StatusCreated, req.Result())
	}
	benchkit.HTTP(b, func(e *idem.Engine) http.Handler {
		ec := a.New()
		if e != nil {
			ec.Use(a.Middleware(e))
		}
		ec.POST("/v1/charges", createCharge)
		return ec
	})
}
