package redisstore_test

import (
	"fmt"
	"log"
	"net/http"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	redisstore "github.com/idemkit/idemkit/stores/redis"
	"github.com/redis/go-redis/v9"
)

// Several instances of one API share their idempotency records through a
// Redis Cluster: each runs this, with the same prefix.
func Example() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
		ContextTimeoutEnabled: true, // New refuses a client without it
	})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.WithPrefix("payments:idem:"))
	if err != nil {
		log.Fatal(err)
	}
	engine := idem.New(idem.Config{Store: store})

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})
	_ = http.ListenAndServe("127.0.0.1:8080", idemhttp.Middleware(engine)(mux))
}

// Key names the Redis key of a record: the prefix, then the SHA-256 of
// scope and key as the Cluster hash tag, so that no scope or key, whatever
// its bytes (braces included), reaches the key space in clear. The digest
// is of the scope's length as a uvarint, the scope, then the key.
func ExampleStore_Key() {
	client := redis.NewClient(&redis.Options{ContextTimeoutEnabled: true})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.WithPrefix("payments:idem:"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(store.Key(idem.ID{Scope: "acct_1", Key: "8e03978e-40d5-43e8-bc93-6894a57f9324"}))
	fmt.Println(store.Key(idem.ID{Scope: "acct_1{", Key: "}"}))
	// Output:
	// payments:idem:{6185ea2dee0cc3816b1fa611abeb2110ed6ba1de979db8e9939ca729acfb42e9}
	// payments:idem:{a33ee7e75b902d046e49b212bade35f87a33b8f9a0c5ebbe99af51ee2324f8f8}
}
