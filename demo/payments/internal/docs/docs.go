// Package docs serves the demo's published idempotency policy as an HTML
// page: the draft asks a resource to publish its policy, and every problem
// type URI of the API leads to a section of this page.
package docs

import (
	_ "embed"
	"html/template"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

//go:embed policy.html
var page string

var tmpl = template.Must(template.New("policy").Parse(page))

// Sections are the ids of the page's sections, one per problem type name.
var Sections = sectionIDs(page)

func sectionIDs(html string) map[string]bool {
	ids := map[string]bool{}
	for _, m := range regexp.MustCompile(`<section id="([a-z-]+)"`).FindAllStringSubmatch(html, -1) {
		ids[m[1]] = true
	}
	return ids
}

// Policy is what the page states, and where it is served.
type Policy struct {
	// TTL and Lease are the server's own settings.
	TTL   time.Duration
	Lease time.Duration
	// Path serves the page; Path + "/" + name is the URI of the problem
	// type name.
	Path string
	// NotFound answers a path under Path that names no problem type.
	NotFound http.Handler
}

// Handler serves the page at p.Path, and sends a problem type's URI on to
// the page's section about it (303 See Other, to Path#name): the type
// names a kind of problem, and the section describes it.
func Handler(p Policy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != p.Path {
			name, _ := strings.CutPrefix(r.URL.Path, p.Path+"/")
			if !Sections[name] {
				p.NotFound.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Location", p.Path+"#"+name)
			w.WriteHeader(http.StatusSeeOther)
			return
		}
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
