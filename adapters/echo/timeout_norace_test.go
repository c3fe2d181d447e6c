//go:build !race

// Echo's Timeout middleware runs the handler in a goroutine that keeps
// using the request's echo.Context after the request has ended, while Echo
// hands that pooled context to the next request: the race detector reports
// that race inside Echo, whatever idemkit does. This test therefore runs in
// the test command's pass without -race (scripts/test-all runs the tests
// named NoRace there).

package idemecho_test

import (
	"net/http"
	"testing"
	"time"

	idemecho "github.com/idemkit/idemkit/adapters/echo"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

func TestTimeoutMiddlewareInsideNoRace(t *testing.T) {
	for _, msg := range []string{"", "custom timeout message"} {
		t.Run("ErrorMessage "+msg, func(t *testing.T) {
			idemtest.TestTimeoutInside(t, func(e *idem.Engine, h http.Handler) http.Handler {
				ec := newEcho()
				ec.Use(idemecho.Middleware(e), middleware.TimeoutWithConfig(middleware.TimeoutConfig{
					Timeout: 50 * time.Millisecond, ErrorMessage: msg}))
				ec.Any("/*", echo.WrapHandler(h))
				return ec
			})
		})
	}
}
