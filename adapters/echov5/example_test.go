package idemecho_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	idemecho "github.com/idemkit/idemkit/adapters/echov5"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
)

func Example() {
	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})

	// The tenant scope: keys of different accounts never meet.
	account := idemecho.WithScope(func(c *echo.Context) string { return c.Request().Header.Get("Authorization") })
	e := echo.New()
	e.Use(middleware.Recover()) // before idemkit, so a panic releases the key and becomes a 500
	v1 := e.Group("/v1", idemecho.Middleware(engine, account))

	var charges atomic.Int64
	v1.POST("/charges", func(c *echo.Context) error {
		var req struct {
			Amount int64 `json:"amount"`
		}
		if err := c.Bind(&req); err != nil { // idemkit hands the body back
			return err // rendered by e.HTTPErrorHandler, and stored like any 400
		}
		n := charges.Add(1)
		return c.JSON(http.StatusCreated, map[string]any{"id": fmt.Sprintf("ch_%d", n), "amount": req.Amount})
	})
	srv := httptest.NewServer(e)
	defer srv.Close()

	post := func(key, body string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer acct_1")
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Println(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), strings.TrimSpace(string(b)))
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
