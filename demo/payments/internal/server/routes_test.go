package server

import "testing"

func TestMatchPath(t *testing.T) {
	for _, c := range []struct {
		pattern, path string
		want          bool
	}{
		{"/v1/charges", "/v1/charges", true},
		{"/v1/charges", "/v1/charges/", false},
		{"/v1/charges", "/v1/charge", false},
		{"/v1/charges/{id}", "/v1/charges/ch_1", true},
		{"/v1/charges/{id}", "/v1/charges/", false},
		{"/v1/charges/{id}", "/v1/charges/ch_1/x", false},
		{"/v1/charges/{id}", "/v1/charges", false},
		{"/", "/", true},
		{"/", "/x", false},
		{"/healthz", "//healthz", false},
		{"/healthz", "healthz", false},
	} {
		if got := matchPath(c.pattern, c.path); got != c.want {
			t.Errorf("matchPath(%q, %q) = %v, want %v", c.pattern, c.path, got, c.want)
		}
	}
}

func TestRoutesCheck(t *testing.T) {
	rs := routes{{"/v1/charges", []string{"GET", "HEAD", "POST"}}, {"/v1/balance", getOnly}, {"/v1/refunds", postOnly}}
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"POST", "/v1/charges", 200, ""},
		{"DELETE", "/v1/charges", 405, "GET, HEAD, POST"},
		{"HEAD", "/v1/balance", 200, ""},
		{"HEAD", "/v1/refunds", 405, "POST"},
		{"POST", "/v1/balance", 405, "GET, HEAD"},
		{"GET", "/v1/nope", 404, ""},
	} {
		if status, allow := rs.check(c.method, c.path); status != c.status || allow != c.allow {
			t.Errorf("check(%s %s) = %d %q, want %d %q", c.method, c.path, status, allow, c.status, c.allow)
		}
	}
}
