package idemecho_test

import (
	"net/http"
	"testing"

	idemecho "github.com/idemkit/idemkit/adapters/echov5"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/internal/benchkit"
	"github.com/labstack/echo/v5"
)

// The benchmarks compare each idemkit path with the same Echo handler alone,
// in the same run, so the ratio is what counts, not the machine.
//
//	go test -run XXX -bench . -benchmem ./adapters/echov5/

// createCharge binds the body and writes a ~150-byte 201 JSON response,
// like a typical create endpoint.
func createCharge(c *echo.Context) error {
	var req benchkit.Charge
	if err := c.Bind(&req); err != nil {
		return err
	}
	c.Response().Header().Set("Location", "/v1/charges/ch_1")
	return c.JSON(http.StatusCreated, req.Result())
}

func BenchmarkMiddleware(b *testing.B) {
	benchkit.HTTP(b, func(e *idem.Engine) http.Handler {
		ec := echo.New()
		if e != nil {
			ec.Use(idemecho.Middleware(e))
		}
		ec.POST("/v1/charges", createCharge)
		return ec
	})
}
