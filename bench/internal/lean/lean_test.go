package lean

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBehaviour: the baseline answers as idemkit does where the benchmark
// compares them: a first request runs, a retry replays, a reuse with
// another body is 422, a request in flight is 409, a 5xx frees the key,
// no key is 400.
func TestBehaviour(t *testing.T) {
	runs := 0
	var inFlight func()
	status := http.StatusCreated
	h := Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		if inFlight != nil {
			f := inFlight
			inFlight = nil
			f()
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write([]byte(`{"run":` + string(rune('0'+runs)) + `}`))
	}))
	do := func(key, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := do("", "{}"); w.Code != http.StatusBadRequest {
		t.Fatalf("no key: %d", w.Code)
	}
	if w := do("k1", `{"a":1}`); w.Code != http.StatusCreated || w.Body.String() != `{"run":1}` || w.Header().Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %q", w.Code, w.Body)
	}
	w := do("k1", `{"a":1}`)
	if w.Code != http.StatusCreated || w.Body.String() != `{"run":1}` || w.Header().Get("Idempotent-Replayed") != "true" ||
		w.Header().Get("Content-Type") != "application/json" || runs != 1 {
		t.Fatalf("replay: %d %q %v runs=%d", w.Code, w.Body, w.Header(), runs)
	}
	if w := do("k1", `{"a":2}`); w.Code != http.StatusUnprocessableEntity || runs != 1 {
		t.Fatalf("other body: %d", w.Code)
	}
	var nested *httptest.ResponseRecorder
	inFlight = func() { nested = do("k2", "{}") }
	do("k2", "{}")
	if nested == nil || nested.Code != http.StatusConflict {
		t.Fatalf("in flight: %v", nested)
	}
	status = http.StatusInternalServerError
	if w := do("k3", "{}"); w.Code != http.StatusInternalServerError {
		t.Fatalf("5xx: %d", w.Code)
	}
	status = http.StatusCreated
	before := runs
	if w := do("k3", "{}"); w.Code != http.StatusCreated || runs != before+1 {
		t.Fatalf("after a 5xx the key runs again: %d runs %d", w.Code, runs-before)
	}
}
