//go:build !race

// gin-contrib/timeout runs the rest of the chain on a goroutine of its own
// that shares the request's gin.Context with the goroutine serving the
// request, which goes on after the timeout: the race detector reports that
// race inside the timeout middleware, whatever idemkit does. This test
// therefore runs in the test command's pass without -race (scripts/test-all
// runs the tests named NoRace there).

package idemgin_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/gin-contrib/timeout"
	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idemkit/adapters/gin"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
)

func TestTimeoutMiddlewareInsideNoRace(t *testing.T) {
	answers := map[string]func(*gin.Context){
		"default response": nil,
		"custom response":  func(c *gin.Context) { c.JSON(http.StatusGatewayTimeout, gin.H{"error": "took too long"}) },
	}
	for name, answer := range answers {
		t.Run(name, func(t *testing.T) {
			idemtest.TestTimeoutInside(t, func(e *idem.Engine, h http.Handler) http.Handler {
				opts := []timeout.Option{timeout.WithTimeout(50 * time.Millisecond)}
				if answer != nil {
					opts = append(opts, timeout.WithResponse(answer))
				}
				r := gin.New()
				r.Use(idemgin.Middleware(e), timeout.New(opts...))
				r.POST("/charges", gin.WrapH(h))
				return r
			})
		})
	}
}
