// Command nethttp is the tutorial's endpoint on the standard library.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"sync/atomic"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()

	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})

	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", createOrder)
	log.Fatal(http.ListenAndServe(*addr, idemhttp.Middleware(engine)(mux)))
}

type order struct {
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
}

var orders atomic.Int64

func createOrder(w http.ResponseWriter, r *http.Request) {
	var o order
	if err := json.NewDecoder(r.Body).Decode(&o); err != nil || o.Item == "" || o.Quantity < 1 {
		http.Error(w, "item and a positive quantity are required", http.StatusBadRequest)
		return
	}
	time.Sleep(time.Second) // a slow payment provider, say
	id := orders.Add(1)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", id))
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(map[string]any{"id": id, "item": o.Item, "quantity": o.Quantity})
}
