// Command echov5 is the tutorial's endpoint on Echo v5.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"sync/atomic"
	"time"

	idemecho "github.com/idemkit/idemkit/adapters/echov5"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()

	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})

	e := echo.New()
	e.Use(middleware.Recover(), idemecho.Middleware(engine))
	e.POST("/orders", createOrder)
	log.Fatal(http.ListenAndServe(*addr, e))
}

type order struct {
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
}

var orders atomic.Int64

func createOrder(c *echo.Context) error {
	var o order
	if err := c.Bind(&o); err != nil || o.Item == "" || o.Quantity < 1 {
		return echo.NewHTTPError(http.StatusBadRequest, "item and a positive quantity are required")
	}
	time.Sleep(time.Second) // a slow payment provider, say
	id := orders.Add(1)
	c.Response().Header().Set("Location", fmt.Sprintf("/orders/%d", id))
	return c.JSON(http.StatusCreated, map[string]any{"id": id, "item": o.Item, "quantity": o.Quantity})
}
