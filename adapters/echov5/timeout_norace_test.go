//go:build !race

// Echo v5 has no Timeout middleware that runs the handler on a goroutine of
// its own (its ContextTimeout only sets a deadline), but net/http's
// http.TimeoutHandler can be registered through echo.WrapMiddleware, and
// then runs the handler on a goroutine that keeps using the request's
// echo.Context after the request has ended, while Echo hands that pooled
// context to the next request: the race detector reports that race inside
// Echo, whatever idemkit does. This test therefore runs in the test
// command's pass without -race (scripts/test-all runs the tests named
// NoRace there).

package idemecho_test

import (
	"net/http"
	"testing"
	"time"

	idemecho "github.com/idemkit/idemkit/adapters/echov5"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/labstack/echo/v5"
)

func TestTimeoutHandlerInsideNoRace(t *testing.T) {
	for _, msg := range []string{"", "custom timeout message"} {
		t.Run("message "+msg, func(t *testing.T) {
			idemtest.TestTimeoutInside(t, func(e *idem.Engine, h http.Handler) http.Handler {
				ec := newEcho()
				ec.Use(idemecho.Middleware(e), echo.WrapMiddleware(func(next http.Handler) http.Handler {
					return http.TimeoutHandler(next, 50*time.Millisecond, msg)
				}))
				ec.Any("/*", echo.WrapHandler(h))
				return ec
			})
		})
	}
}
