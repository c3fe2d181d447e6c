package idemecho_test

import (
	"fmt"
	"net/http"
	"sync/atomic"

	idemecho "github.com/idemkit/idemkit/adapters/echo"
	"github.com/idemkit/idemkit/adapters/internal/echocore/echotest"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

func Example() {
	engine := idem.New(idem.Config{Store: memstore.New()})
	// The tenant scope: keys of different accounts never meet.
	account := idemecho.WithScope(func(c echo.Context) string { return c.Request().Header.Get("Authorization") })
	e := echo.New()
	e.Use(middleware.Recover()) // before idemkit, so a panic releases the key and becomes a 500
	v1 := e.Group("/v1", idemecho.Middleware(engine, account))

	var charges atomic.Int64
	v1.POST("/charges", func(c echo.Context) error {
		// The handler runs with the lock's context: the key it holds (and
		// its fencing token) can go downstream, as a payment provider's own
		// idempotency key, say. c.Bind and c.Request().Body read the body
		// as usual: idemkit hands it back.
		held, _ := idem.HeldKey(c.Request().Context())
		return c.JSON(http.StatusCreated, map[string]any{"id": fmt.Sprintf("ch_%d", charges.Add(1)), "key": held.ID.Key})
	})

	// A charge, its retry (replayed, not charged again), and the same key
	// for another charge; Post serves each with e and prints the status,
	// the Idempotent-Replayed header and the body.
	for _, body := range []string{`{"amount":1999}`, `{ "amount": 1999 }`, `{"amount":2999}`} {
		echotest.Post(e, "/v1/charges", `"order-1234"`, body, "Authorization", "Bearer acct_1")
	}
	fmt.Println("charges made:", charges.Load())
	// Output:
	// 201  {"id":"ch_1","key":"order-1234"}
	// 201 true {"id":"ch_1","key":"order-1234"}
	// 422  {"type":"https://github.com/idemkit/idemkit/blob/main/docs/problems.md#key-reused","title":"Idempotency-Key reused with a different request","status":422,"detail":"This Idempotency-Key was already used with a different request (method, path or body)."}
	// charges made: 1
}
