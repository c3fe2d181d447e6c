// Command fiberv3 is the tutorial's endpoint on Fiber v3.
package main

import (
	"flag"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/recover"
	idemfiber "github.com/idemkit/idemkit/adapters/fiberv3"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()

	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})

	// A body over Fiber's BodyLimit gets idemkit's 413 problem, as one over MaxRequestBody does.
	app := fiber.New(fiber.Config{ErrorHandler: idemfiber.ErrorHandler(engine, nil)})
	app.Use(recover.New(), idemfiber.New(engine))
	app.Post("/orders", createOrder)
	log.Fatal(app.Listen(*addr))
}

type order struct {
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
}

var orders atomic.Int64

func createOrder(c fiber.Ctx) error {
	var o order
	if err := c.Bind().Body(&o); err != nil || o.Item == "" || o.Quantity < 1 {
		return fiber.NewError(fiber.StatusBadRequest, "item and a positive quantity are required")
	}
	time.Sleep(time.Second) // a slow payment provider, say
	id := orders.Add(1)
	c.Location(fmt.Sprintf("/orders/%d", id))
	return c.Status(fiber.StatusCreated).JSON(fiber.Map{"id": id, "item": o.Item, "quantity": o.Quantity})
}
