// Command gin is the tutorial's first idempotent endpoint, on Gin.
package main

import (
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idemkit/adapters/gin"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
)

type order struct {
	Item     string `json:"item" binding:"required"`
	Quantity int    `json:"quantity" binding:"required,min=1"`
}

var orders atomic.Int64

func createOrder(c *gin.Context) {
	var o order
	if err := c.ShouldBindJSON(&o); err != nil {
		c.JSON(http.StatusBadRequest, gin.H{"error": err.Error()})
		return
	}
	time.Sleep(time.Second) // a slow payment provider, say
	id := orders.Add(1)
	c.Header("Location", fmt.Sprintf("/orders/%d", id))
	c.JSON(http.StatusCreated, gin.H{"id": id, "item": o.Item, "quantity": o.Quantity})
}

func main() {
	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})

	r := gin.New()
	r.Use(gin.Recovery(), idemgin.Middleware(engine))
	r.POST("/orders", createOrder)
	r.Run(addr())
}

// addr is where the server listens: $ADDR, or 127.0.0.1:8080.
func addr() string {
	if a := os.Getenv("ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:8080"
}
