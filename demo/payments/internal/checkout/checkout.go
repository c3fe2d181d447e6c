// Package checkout serves the demo's checkout page at /: a Pay form, the
// timeline of every attempt and the account's balance, in plain HTML, CSS
// and JavaScript embedded in the binary. Its script, checkout.js, is
// idemkit's reference client for browsers: one Idempotency-Key per
// payment, retried with backoff on the answers that may change.
package checkout

import (
	"embed"
	"net/http"
)

//go:embed index.html checkout.css checkout.js
var files embed.FS

// Paths are the paths the page is served at.
var Paths = []string{"/", "/checkout.css", "/checkout.js"}

var types = map[string]string{
	"/":             "text/html; charset=utf-8",
	"/checkout.css": "text/css; charset=utf-8",
	"/checkout.js":  "text/javascript; charset=utf-8",
}

// contentSecurityPolicy lets the page load its own files and call its own
// API, and nothing else: no inline script, no other origin.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page's files at Paths, and 404 through notFound for
// any other path.
func Handler(notFound http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctype, ok := types[r.URL.Path]
		if !ok {
			notFound.ServeHTTP(w, r)
			return
		}
		name := r.URL.Path[1:]
		if name == "" {
			name = "index.html"
		}
		body, err := files.ReadFile(name)
		if err != nil {
			notFound.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", ctype)
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		w.Write(body)
	})
}
