package fibertest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
)

// Post is the adapters' examples' client: it sends a POST of the JSON body
// to path, with the Idempotency-Key key and the header fields given as
// name, value pairs, through test (the app's Test method), and prints the
// response's status, its Idempotent-Replayed header and its body.
func Post[T any](test func(*http.Request, ...T) (*http.Response, error), path, key, body string, header ...string) {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := test(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), string(b))
}
