// Package checkout serves the demo's checkout page at /: a Pay form, the
// timeline of every attempt and the account's balance, in plain HTML, CSS
// and JavaScript embedded in the binary. Its script, checkout.js, is
// idemkit's reference client for browsers: one Idempotency-Key per
// payment, retried with backoff on the answers that may change.
package checkout

import (
	"bytes"
	"embed"
	"html/template"
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
// any other path. faultInjection says whether the server injects the
// faults the page's "Flaky network" switch asks for (app.Config's
// FaultInjection): if not, the page shows the switch disabled and says
// that the operator turns it on.
func Handler(notFound http.Handler, faultInjection bool) http.Handler {
	bodies := map[string][]byte{}
	for path := range types {
		name := path[1:]
		if name == "" {
			name = "index.html"
		}
		body, err := files.ReadFile(name)
		if err != nil {
			panic(err) // embedded: only a broken build lacks it
		}
		if path == "/" {
			var page bytes.Buffer
			err := template.Must(template.New(name).Parse(string(body))).Execute(&page, struct{ FaultInjection bool }{faultInjection})
			if err != nil {
				panic(err)
			}
			body = page.Bytes()
		}
		bodies[path] = body
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := bodies[r.URL.Path]
		if !ok {
			notFound.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", types[r.URL.Path])
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		w.Write(body)
	})
}
