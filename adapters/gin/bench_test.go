package idemgin_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idemkit/adapters/gin"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/internal/benchkit"
)

// The benchmarks compare each idemkit path with the same Gin handler alone,
// in the same run, so the ratio is what counts, not the machine.
//
//	go test -run XXX -bench . -benchmem ./adapters/gin/

// createCharge binds the body and writes a ~150-byte 201 JSON response,
// like a typical create endpoint.
func createCharge(c *gin.Context) {
	var req benchkit.Charge
	if err := c.ShouldBindJSON(&req); err != nil {
		c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
		return
	}
	c.Header("Location", "/v1/charges/ch_1")
	c.JSON(http.StatusCreated, req.Result())
}

func BenchmarkMiddleware(b *testing.B) {
	gin.SetMode(gin.ReleaseMode)
	benchkit.HTTP(b, func(e *idem.Engine) http.Handler {
		r := gin.New()
		if e != nil {
			r.Use(idemgin.Middleware(e))
		}
		r.POST("/v1/charges", createCharge)
		return r
	})
}
