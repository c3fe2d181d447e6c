//go:build !race

// Fiber v3's timeout middleware, when it gives up, writes its answer into
// the request's response while the handler it left running writes into the
// same response on its own goroutine: the race detector reports that race
// inside Fiber, whatever idemkit does. This test therefore runs in the
// test command's pass without -race (scripts/test-all runs the tests named
// NoRace there).

package idemfiber_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/timeout"

	idemfiber "github.com/idemkit/idemkit/adapters/fiberv3"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/idemtest"
)

// TestTimeoutBeforeNoRace: Fiber's timeout registered before idemkit (as
// middleware that calls c.Next) answers 408 while idemkit and the handler
// go on; the handler's response is recorded when it ends, and a retry gets
// it, without a second run.
func TestTimeoutBeforeNoRace(t *testing.T) {
	configure, events := idemtest.Outcomes()
	e := idemtest.NewEngine(t, configure)
	var calls atomic.Int64
	app := fiber.New()
	app.Use(timeout.New(func(c fiber.Ctx) error { return c.Next() }, timeout.Config{Timeout: 20 * time.Millisecond}))
	app.Use(idemfiber.New(e))
	app.Post("/charges", func(c fiber.Ctx) error {
		calls.Add(1)
		time.Sleep(200 * time.Millisecond) // past the timeout
		return c.Status(fiber.StatusCreated).SendString("created")
	})
	url := listen(t, app)
	if r := idemtest.Post(t, url+"/charges", "k1", `{}`); r.Status != fiber.StatusRequestTimeout {
		t.Fatalf("first request: %d %s, want the timeout's 408", r.Status, r.Body)
	}
	idemtest.WantOutcome(t, events, idemevent.Stored, "")
	r := idemtest.Post(t, url+"/charges", "k1", `{}`)
	if r.Status != fiber.StatusCreated || !r.Replayed() || r.Body != "created" || calls.Load() != 1 {
		t.Fatalf("retry: %d %q (replayed %v) after %d runs, want the replay of the one run", r.Status, r.Body, r.Replayed(), calls.Load())
	}
}
