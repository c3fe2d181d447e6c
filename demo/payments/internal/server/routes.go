package server

import (
	"net/http"
	"slices"
	"strings"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/checkout"
)

// route is a path a server answers and the methods it accepts there.
type route struct {
	// pattern is a path whose segments in braces, such as {id}, match any
	// one non-empty segment.
	pattern string
	methods []string
}

// routes is the table of what one listener serves. Every framework's
// server, and the admin server, first holds each request against it:
// a path it does not serve is 404, a method it does not accept there 405
// with Allow. So a request the demo does not serve never reaches
// authentication or idemkit, and records nothing, whatever its key.
type routes []route

// Wherever a route answers GET it answers HEAD, as GET without a body
// (RFC 9110, section 9.3.2).
var (
	getOnly  = []string{http.MethodGet, http.MethodHead}
	postOnly = []string{http.MethodPost}
)

// apiRoutes is the table of the API listener.
func apiRoutes(cfg Config) routes {
	rs := routes{
		{"/healthz", getOnly},
		{api.DocsPath, getOnly},
		{api.DocsPath + "/{name}", getOnly},
		{"/v1/charges", []string{http.MethodGet, http.MethodHead, http.MethodPost}},
		{"/v1/charges/{id}", getOnly},
		{"/v1/refunds", postOnly},
		{"/v1/balance", getOnly},
		{"/v1/settlements", getOnly},
		{api.WebhookPath, postOnly},
	}
	for _, path := range checkout.Paths {
		rs = append(rs, route{path, getOnly})
	}
	if !cfg.SeparateAdmin {
		rs = append(rs, adminRoutes()...)
	}
	return rs
}

// adminRoutes are the operators' endpoints: on the API listener, or on
// the admin listener alone when there is one.
func adminRoutes() routes {
	return routes{{"/metrics", getOnly}, {DebugPath, getOnly}}
}

// check reports whether method and path may go on: ok, or the status to
// answer (404 or 405) and, for 405, the Allow field's value.
func (rs routes) check(method, path string) (status int, allow string) {
	for _, r := range rs {
		if !matchPath(r.pattern, path) {
			continue
		}
		if slices.Contains(r.methods, method) {
			return http.StatusOK, ""
		}
		return http.StatusMethodNotAllowed, strings.Join(r.methods, ", ")
	}
	return http.StatusNotFound, ""
}

// matchPath reports whether path matches pattern, segment by segment.
func matchPath(pattern, path string) bool {
	for {
		p, pRest, pMore := strings.Cut(pattern, "/")
		s, sRest, sMore := strings.Cut(path, "/")
		if strings.HasPrefix(p, "{") {
			if s == "" {
				return false
			}
		} else if p != s {
			return false
		}
		if !pMore || !sMore {
			return pMore == sMore
		}
		pattern, path = pRest, sRest
	}
}

// guard answers the requests rs refuses, and passes the others to next.
func guard(a *api.API, rs routes, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, allow := rs.check(r.Method, r.URL.Path)
		if status == http.StatusOK {
			next.ServeHTTP(w, r)
			return
		}
		if allow != "" {
			w.Header().Set("Allow", allow)
		}
		api.WriteResponse(w, frameworkError(a, status))
	})
}
