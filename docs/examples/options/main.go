// Command options shows two settings teams reach for: a rule of their own
// for keys (idem.Config.ValidateKey), and requests the middleware leaves
// alone (its skip predicate, here idemhttp.WithSkip).
package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
)

// uuidPattern matches a UUID in its canonical, lower-case form.
var uuidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func main() {
	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{
		Store: store,
		// A key that is not a UUID gets 400 key-invalid, with this error's text as the detail.
		ValidateKey: func(key string) error {
			if !uuidPattern.MatchString(key) {
				return errors.New("the Idempotency-Key must be a UUID, such as \"8e03978e-40d5-43e8-bc93-6894a57f9324\"")
			}
			return nil
		},
	})

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/orders", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "order created")
	})
	mux.HandleFunc("POST /v1/search", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "3 orders found")
	})
	// A search sent as POST changes nothing: it needs no key, and nothing of it is recorded.
	search := idemhttp.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/v1/search" })
	srv := httptest.NewServer(idemhttp.Middleware(engine, search)(mux))
	defer srv.Close()

	post(srv.URL+"/v1/orders", `"order-1"`)
	post(srv.URL+"/v1/orders", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	post(srv.URL+"/v1/search", "")
}

// post sends a POST with key (none if empty) and prints the answer.
func post(url, key string) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("%s %s: %d %s\n", url[strings.LastIndex(url, "/"):], key, resp.StatusCode, body)
}
