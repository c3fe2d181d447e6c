package echotest

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
)

// Post is the adapters' examples' client: it serves a POST of the JSON
// body to path, with the Idempotency-Key key and the header fields given
// as name, value pairs, with h (the Echo app), and prints the response's
// status, its Idempotent-Replayed header and its body.
func Post(h http.Handler, path, key, body string, header ...string) {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	fmt.Println(rec.Code, rec.Header().Get("Idempotent-Replayed"), strings.TrimSpace(rec.Body.String()))
}
