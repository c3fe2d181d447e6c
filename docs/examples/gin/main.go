// Command gin is the tutorial's first idempotent endpoint, on Gin.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idemkit/adapters/gin"
	idem "github.com/idemkit/idemkit/core" // the package at .../core is named idem
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
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()

	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})

	r := gin.New()
	r.Use(gin.Recovery(), idemgin.Middleware(engine))
	r.POST("/orders", createOrder)
	log.Fatal(r.Run(*addr))
}
