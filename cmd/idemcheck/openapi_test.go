package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
)

// TestOpenAPI checks every POST and PATCH operation of testdata/openapi.yaml
// that declares Idempotency-Key, against the reference middleware, with
// bodies from the operations' examples.
func TestOpenAPI(t *testing.T) {
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	g := newGate(false)
	h := idemhttp.Middleware(idem.New(idem.Config{Store: store}), idemhttp.WithScope(scope))(&app{gate: g})
	var unchecked atomic.Int64
	srv := httptest.NewServer(g.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/refunds" || r.URL.Path == "/v1/webhooks":
			unchecked.Add(1)
		case r.Method == http.MethodPost && r.Header.Get("X-Api-Version") != "2025-01-01":
			// The document's required header, with its example.
			http.Error(w, "X-Api-Version is required", http.StatusBadRequest)
			return
		}
		h.ServeHTTP(w, r)
	})))
	t.Cleanup(srv.Close)

	code, rep, stderr := runJSON(t,
		"-url", srv.URL,
		"-openapi", "testdata/openapi.yaml",
		"-H", "Authorization: Bearer acct_a",
		"-tenant2", "Authorization: Bearer acct_b",
		"-slow-header", delayHeader+": 1",
		"-fail-header", failHeader+": 1",
		"-strict", "-json")
	if code != 0 {
		t.Fatalf("exit status %d, want 0%s\nstderr: %s", code, failures(rep), stderr)
	}
	var names []string
	for _, tr := range rep.Targets {
		names = append(names, tr.Name)
		if len(tr.Results) != len(rules) {
			t.Errorf("%s: %d results, want %d", tr.Name, len(tr.Results), len(rules))
		}
		for _, r := range tr.Results {
			if r.Status != "pass" {
				t.Errorf("%s: %s %s: %s", tr.Name, r.ID, r.Status, r.Detail)
			}
		}
	}
	want := []string{"POST " + srv.URL + "/v1/things", "PATCH " + srv.URL + "/v1/things/obj_0001"}
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Errorf("checked %q, want %q", names, want)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0] != "POST /v1/webhooks: the request body has no example" {
		t.Errorf("not checked: %q, want the webhook operation, for want of an example", rep.Skipped)
	}
	if n := unchecked.Load(); n != 0 {
		t.Errorf("%d requests to operations that are not checked", n)
	}
	if !strings.Contains(stderr, "to 2 operations under "+srv.URL) {
		t.Errorf("announcement: %s", stderr)
	}
}

// TestOpenAPIMethodFilter: -X limits the operations checked.
func TestOpenAPIMethodFilter(t *testing.T) {
	base := &target{keyHeader: "Idempotency-Key", header: http.Header{}}
	targets, _, err := openapiTargets("testdata/openapi.yaml", "http://127.0.0.1:1", http.MethodPatch, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(targets) != 1 || targets[0].method != http.MethodPatch {
		t.Fatalf("targets %+v, want the PATCH operation only", targets)
	}
	tg := targets[0]
	if tg.body != `{"color":"red","size":4}` || tg.otherBody != `{"color":"blue","size":2}` {
		t.Errorf("body %q, other %q: want the two examples", tg.body, tg.otherBody)
	}
	if ct := tg.header.Get("Content-Type"); ct != "application/merge-patch+json" {
		t.Errorf("Content-Type %q, want the example's media type", ct)
	}
}

func TestOpenAPIBadDocument(t *testing.T) {
	var stdout, stderr strings.Builder
	code := run([]string{"-url", "http://127.0.0.1:1", "-openapi", "testdata/missing.yaml"}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "-openapi") {
		t.Errorf("exit %d, stderr %q; want 2 and a message about -openapi", code, stderr.String())
	}
}
