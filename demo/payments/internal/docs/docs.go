// Package docs serves the demo's published idempotency policy as an HTML
// page: the draft asks a resource to publish its policy, and every problem
// type URI of the API points into this page.
package docs

import (
	_ "embed"
	"html/template"
	"net/http"
	"strconv"
	"time"
)

//go:embed policy.html
var page string

var tmpl = template.Must(template.New("policy").Parse(page))

// Policy is what the page states; the values are the server's own settings.
type Policy struct {
	TTL   time.Duration
	Lease time.Duration
}

// Handler serves the page for the docs path and every problem type under it.
func Handler(p Policy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		tmpl.Execute(w, map[string]string{
			"TTL":   human(p.TTL),
			"Lease": human(p.Lease),
			"Renew": human(p.Lease / 3),
		})
	})
}

func human(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return plural(int(d/time.Hour), "hour")
	case d%time.Minute == 0:
		return plural(int(d/time.Minute), "minute")
	case d%time.Second == 0:
		return plural(int(d/time.Second), "second")
	}
	return d.String()
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.Itoa(n) + " " + unit + "s"
}
