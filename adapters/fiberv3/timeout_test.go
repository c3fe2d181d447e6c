package idemfiber_test

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/adaptor"
	"github.com/gofiber/fiber/v3/middleware/timeout"

	idemfiber "github.com/idemkit/idemkit/adapters/fiberv3"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/idemtest"
)

// TestTimeoutInside: Fiber v3's timeout middleware wraps a route's
// handler, so with idemkit registered with app.Use it is always inside
// idemkit. When time is up it answers 408 and leaves the handler running
// on a goroutine of its own: the key must stay locked, or a retry would
// run beside it. The suite's server is a reverse proxy in front of a real
// Fiber listener.
func TestTimeoutInside(t *testing.T) {
	idemtest.TestTimeoutInside(t, func(e *idem.Engine, h http.Handler) http.Handler {
		app := fiber.New()
		app.Use(idemfiber.New(e))
		app.Post("/charges", timeout.New(func(c fiber.Ctx) error {
			ctx := c.Context() // the timeout's, below the lock's
			return adaptor.HTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.ServeHTTP(w, r.WithContext(ctx))
			}))(c)
		}, timeout.Config{Timeout: 50 * time.Millisecond}))
		u, err := url.Parse(listen(t, app))
		if err != nil {
			t.Fatal(err)
		}
		return httputil.NewSingleHostReverseProxy(u)
	})
}

// TestTimeoutInsideReleasedAfterLease: the key a timed-out handler was
// left running with is released one lease later, not before, with the
// outcome not-stored, timeout-inside.
func TestTimeoutInsideReleasedAfterLease(t *testing.T) {
	const lease = 10 * time.Second
	clock := idemtest.NewClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	configure, events := idemtest.Outcomes()
	e := idemtest.NewEngine(t, configure, func(c *idem.Config) { c.Clock, c.Lease = clock, lease })
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var calls atomic.Int64
	app := fiber.New()
	app.Use(idemfiber.New(e))
	app.Post("/charges", timeout.New(func(c fiber.Ctx) error {
		if calls.Add(1) == 1 {
			<-release // the first run outlives its timeout, ignoring its context
		}
		return c.Status(fiber.StatusCreated).SendString("created")
	}, timeout.Config{Timeout: 20 * time.Millisecond}))
	url := listen(t, app)

	if r := idemtest.Post(t, url+"/charges", "k1", `{}`); r.Status != fiber.StatusRequestTimeout {
		t.Fatalf("first request: %d %s, want the timeout's 408", r.Status, r.Body)
	}
	clock.Advance(lease - time.Second)
	if r := idemtest.Post(t, url+"/charges", "k1", `{}`); r.Status != fiber.StatusConflict {
		t.Fatalf("retry within the lease: %d %s, want 409", r.Status, r.Body)
	}
	clock.Advance(time.Second)
	idemtest.WantOutcome(t, events, idemevent.NotStored, exchange.ReasonTimeoutInside)
	if r := idemtest.Post(t, url+"/charges", "k1", `{}`); r.Status != fiber.StatusCreated || r.Replayed() {
		t.Fatalf("retry after the lease: %d %s (replayed %v), want a second run's 201", r.Status, r.Body, r.Replayed())
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want twice", n)
	}
}
