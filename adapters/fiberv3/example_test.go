package idemfiber_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/recover"

	idemfiber "github.com/idemkit/idemkit/adapters/fiberv3"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
)

func Example() {
	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})

	// A body over Fiber's BodyLimit gets idemkit's 413 problem, like one over MaxRequestBody.
	app := fiber.New(fiber.Config{ErrorHandler: idemfiber.ErrorHandler(engine, nil)})
	app.Use(recover.New()) // first: a panicking handler releases its key, then gets a 500
	// The tenant scope: keys of different accounts never meet.
	app.Use(idemfiber.New(engine, idemfiber.WithScope(func(c fiber.Ctx) string {
		return c.Get(fiber.HeaderAuthorization)
	})))

	var charges atomic.Int64
	app.Post("/v1/charges", func(c fiber.Ctx) error {
		var req struct {
			Amount int `json:"amount"`
		}
		if err := c.Bind().Body(&req); err != nil {
			return fiber.ErrBadRequest
		}
		n := charges.Add(1)
		return c.Status(fiber.StatusCreated).JSON(fiber.Map{"id": fmt.Sprintf("ch_%d", n), "amount": req.Amount})
	})

	post := func(key, body string) {
		req := httptest.NewRequest(fiber.MethodPost, "/v1/charges", strings.NewReader(body))
		req.Header.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		req.Header.Set(fiber.HeaderAuthorization, "Bearer acct_1")
		req.Header.Set("Idempotency-Key", key)
		resp, err := app.Test(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b))
	}
	post(`"order-1234"`, `{"amount":1999}`)
	post(`"order-1234"`, `{ "amount": 1999 }`) // a retry: replayed, not charged again
	post(`"order-1234"`, `{"amount":2999}`)    // the same key for another charge
	fmt.Println("charges made:", charges.Load())
	// Output:
	// 201  {"amount":1999,"id":"ch_1"}
	// 201 true {"amount":1999,"id":"ch_1"}
	// 422  {"type":"https://github.com/idemkit/idemkit/blob/main/docs/problems.md#key-reused","title":"Idempotency-Key reused with a different request","status":422,"detail":"This Idempotency-Key was already used with a different request (method, path or body)."}
	// charges made: 1
}

// Guard only some routes: a group, or a single route.
func ExampleNew_group() {
	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})

	app := fiber.New()
	var n atomic.Int64
	created := func(c fiber.Ctx) error {
		return c.Status(fiber.StatusCreated).SendString(fmt.Sprint("created ", n.Add(1)))
	}
	payments := app.Group("/v1/payments", idemfiber.New(engine))
	payments.Post("/", created)
	app.Post("/v1/refunds", idemfiber.New(engine), created)
	app.Post("/v1/notes", created) // not guarded: no key needed

	for _, path := range []string{"/v1/payments", "/v1/payments", "/v1/refunds", "/v1/refunds", "/v1/notes"} {
		req := httptest.NewRequest(fiber.MethodPost, path, nil)
		if path != "/v1/notes" {
			req.Header.Set("Idempotency-Key", "key"+path) // a key belongs to one request
		}
		resp, err := app.Test(req)
		if err != nil {
			panic(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%s %d %q replayed=%t\n", path, resp.StatusCode, b, resp.Header.Get("Idempotent-Replayed") == "true")
	}
	// Output:
	// /v1/payments 201 "created 1" replayed=false
	// /v1/payments 201 "created 1" replayed=true
	// /v1/refunds 201 "created 2" replayed=false
	// /v1/refunds 201 "created 2" replayed=true
	// /v1/notes 201 "created 3" replayed=false
}
