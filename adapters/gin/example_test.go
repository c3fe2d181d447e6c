package idemgin_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idemkit/adapters/gin"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
)

func Example() {
	gin.SetMode(gin.ReleaseMode) // no route listing on stdout
	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})

	// The tenant scope: keys of different accounts never meet.
	account := idemgin.WithScope(func(c *gin.Context) string { return c.GetHeader("Authorization") })
	r := gin.New()
	r.Use(gin.Recovery()) // before idemkit, so a panic releases the key and becomes a 500
	v1 := r.Group("/v1", idemgin.Middleware(engine, account))

	var charges atomic.Int64
	v1.POST("/charges", func(c *gin.Context) {
		var req struct {
			Amount int64 `json:"amount" binding:"required"`
		}
		if err := c.ShouldBindJSON(&req); err != nil { // idemkit hands the body back
			c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
			return
		}
		n := charges.Add(1)
		c.JSON(http.StatusCreated, gin.H{"id": fmt.Sprintf("ch_%d", n), "amount": req.Amount})
	})
	srv := httptest.NewServer(r)
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
