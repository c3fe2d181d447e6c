package idemfiber_test

import (
	"fmt"
	"sync/atomic"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"

	idemfiber "github.com/idemkit/idemkit/adapters/fiber"
	"github.com/idemkit/idemkit/adapters/internal/fasthttpcore/fibertest"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
)

func Example() {
	engine := idem.New(idem.Config{Store: memstore.New()})
	// The tenant scope: keys of different accounts never meet.
	account := idemfiber.WithScope(func(c *fiber.Ctx) string { return c.Get(fiber.HeaderAuthorization) })
	// A body over Fiber's BodyLimit gets idemkit's 413 problem, like one over MaxRequestBody.
	app := fiber.New(fiber.Config{ErrorHandler: idemfiber.ErrorHandler(engine, nil)})
	app.Use(recover.New()) // first: a panicking handler releases its key, then gets a 500
	// Every route of the group is guarded; app.Use(idemfiber.New(...)) would
	// guard every route of the app, and app.Post(path, idemfiber.New(...), h) one.
	v1 := app.Group("/v1", idemfiber.New(engine, account))

	var charges atomic.Int64
	v1.Post("/charges", func(c *fiber.Ctx) error {
		var req struct {
			Amount int `json:"amount"`
		}
		if err := c.BodyParser(&req); err != nil {
			return fiber.ErrBadRequest
		}
		n := charges.Add(1)
		// The handler runs with the lock's context, c.UserContext(): the key
		// it holds (and its fencing token) can go downstream, as a payment
		// provider's own idempotency key, say.
		held, _ := idem.HeldKey(c.UserContext())
		return c.Status(fiber.StatusCreated).JSON(fiber.Map{"id": fmt.Sprintf("ch_%d", n), "amount": req.Amount, "key": held.ID.Key})
	})

	// A charge, its retry (replayed, not charged again), and the same key
	// for another charge; Post sends each through app.Test and prints the
	// status, the Idempotent-Replayed header and the body.
	for _, body := range []string{`{"amount":1999}`, `{ "amount": 1999 }`, `{"amount":2999}`} {
		fibertest.Post(app.Test, "/v1/charges", `"order-1234"`, body, fiber.HeaderAuthorization, "Bearer acct_1")
	}
	fmt.Println("charges made:", charges.Load())
	// Output:
	// 201  {"amount":1999,"id":"ch_1","key":"order-1234"}
	// 201 true {"amount":1999,"id":"ch_1","key":"order-1234"}
	// 422  {"type":"https://github.com/idemkit/idemkit/blob/main/docs/problems.md#key-reused","title":"Idempotency-Key reused with a different request","status":422,"detail":"This Idempotency-Key was already used with a different request (method, path or body)."}
	// charges made: 1
}
