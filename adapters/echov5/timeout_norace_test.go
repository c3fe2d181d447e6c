//go:build !race

// http.TimeoutHandler, registered through echo.WrapMiddleware, runs the
// handler on a goroutine that keeps using the request's echo.Context after
// the request has ended, while Echo hands that pooled context to the next
// request: the race detector reports that race inside Echo, whatever
// idemkit does. This test therefore runs in the test command's pass
// without -race (scripts/test-all runs the tests named NoRace there).

package idemecho_test

import (
	"testing"

	"github.com/idemkit/idemkit/adapters/internal/echocore/echotest"
)

// TestTimeoutInsideNoRace: http.TimeoutHandler inside idemkit.
func TestTimeoutInsideNoRace(t *testing.T) { echotest.TimeoutInside(t, adapter) }
