package idemadmin_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemadmin"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/memstore"
)

// doorFixture is a memory store holding one completed record (scope
// acct_1, key c-1) and one expired one, behind a handler.
type doorFixture struct {
	store *memstore.Store
	h     http.Handler
	logs  *bytes.Buffer
	id    idem.ID
	now   time.Time
}

func newDoorFixture(t *testing.T, o idemadmin.HandlerOptions) *doorFixture {
	t.Helper()
	store := memstore.New(memstore.WithPurgeInterval(0))
	t.Cleanup(func() { store.Close() })
	f := &doorFixture{store: store, logs: &bytes.Buffer{}, id: idem.ID{Scope: "acct_1", Key: "c-1"}, now: time.Now().Round(0)}
	ctx := context.Background()
	for _, rec := range []struct {
		id idem.ID
		at time.Time
	}{{f.id, f.now}, {idem.ID{Scope: "acct_1", Key: "old"}, f.now.Add(-3 * time.Hour)}} {
		if _, _, err := store.Acquire(ctx, idem.Acquire{ID: rec.id, Token: "t", Now: rec.at, LeaseUntil: rec.at.Add(time.Minute),
			ExpiresAt: rec.at.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := store.Complete(ctx, rec.id, "t", idem.Completion{Response: exchange.Response{Status: 201, Body: []byte(`{}`)},
			CompletedAt: rec.at, ExpiresAt: rec.at.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	o.Now = func() time.Time { return f.now }
	o.Logger = slog.New(slog.NewTextHandler(f.logs, nil))
	f.h = idemadmin.Handler(store, o)
	return f
}

// req is a request to the handler: from peer, for host, with headers.
type req struct {
	method, path, body string
	peer, host         string
	header             map[string]string
}

func (f *doorFixture) do(r req) *httptest.ResponseRecorder {
	hr := httptest.NewRequest(r.method, "http://"+r.host+"/idemadmin/"+r.path, strings.NewReader(r.body))
	hr.RemoteAddr, hr.Host = r.peer, r.host
	if r.method == http.MethodPost {
		hr.Header.Set("Content-Type", "application/json")
	}
	for k, v := range r.header {
		if v == "" {
			hr.Header.Del(k)
		} else {
			hr.Header.Set(k, v)
		}
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, hr)
	return rec
}

// untouched fails t unless both records are still there.
func (f *doorFixture) untouched(t *testing.T, what string) {
	t.Helper()
	if f.store.Len() != 2 {
		t.Fatalf("%s: %d records left of 2: the refused request deleted records", what, f.store.Len())
	}
}

func problemType(rec *httptest.ResponseRecorder) string {
	if rec.Header().Get("Content-Type") != exchange.ProblemContentType {
		return "(no problem: " + rec.Body.String() + ")"
	}
	_, after, _ := strings.Cut(rec.Body.String(), `"type":"`+idemadmin.ProblemBase)
	name, _, _ := strings.Cut(after, `"`)
	return name
}

const forgetC1 = `{"scope":"acct_1","key":"c-1"}`

// Defect: the handler served anyone who reached its listener: a forget from
// another machine, or from a page whose DNS name was rebound to 127.0.0.1,
// made a completed charge run again. Without a token it serves a loopback
// peer that names a loopback host, and nothing else.
func TestDoorServesLoopbackOnlyWithoutToken(t *testing.T) {
	f := newDoorFixture(t, idemadmin.HandlerOptions{})
	for _, r := range []req{
		{peer: "10.0.0.7:5555", host: "127.0.0.1:9091"},
		{peer: "192.168.1.20:5555", host: "payments.internal:9091"},
		{peer: "127.0.0.1:5555", host: "rebound.example:9091"}, // DNS rebinding: the page's own name
		{peer: "127.0.0.1:5555", host: ""},
	} {
		r.method, r.path, r.body = http.MethodPost, "forget", forgetC1
		if rec := f.do(r); rec.Code != http.StatusForbidden || problemType(rec) != "forbidden" {
			t.Errorf("forget from %s for Host %q: %d %s; want 403 forbidden", r.peer, r.host, rec.Code, rec.Body)
		}
		f.untouched(t, "forget from "+r.peer)
		r.method, r.path, r.body = http.MethodPost, "purge", `{}`
		if rec := f.do(r); rec.Code != http.StatusForbidden {
			t.Errorf("purge from %s for Host %q: %d %s; want 403", r.peer, r.host, rec.Code, rec.Body)
		}
		f.untouched(t, "purge from "+r.peer)
	}
	for _, r := range []req{
		{peer: "127.0.0.1:5555", host: "localhost:9091"},
		{peer: "[::1]:5555", host: "[::1]:9091"},
		{peer: "127.0.0.2:5555", host: "127.0.0.1:9091"},
	} {
		r.method, r.path = http.MethodGet, "stats"
		if rec := f.do(r); rec.Code != http.StatusOK {
			t.Errorf("stats from %s for Host %q: %d %s; want 200", r.peer, r.host, rec.Code, rec.Body)
		}
	}
	if rec := f.do(req{method: http.MethodPost, path: "forget", body: forgetC1, peer: "127.0.0.1:5555", host: "127.0.0.1:9091"}); rec.Code != http.StatusOK {
		t.Fatalf("forget from loopback: %d %s", rec.Code, rec.Body)
	}
}

// With a token, a peer anywhere is served if it carries the token, and no
// one without it, loopback included.
func TestDoorToken(t *testing.T) {
	f := newDoorFixture(t, idemadmin.HandlerOptions{Token: "s3cret-t0ken"})
	for _, auth := range []string{"", "Bearer wrong", "Bearer s3cret-t0ke", "Basic czNjcmV0LXQwa2Vu", "s3cret-t0ken", "Bearer"} {
		for _, peer := range []string{"10.0.0.7:5555", "127.0.0.1:5555"} {
			rec := f.do(req{method: http.MethodPost, path: "forget", body: forgetC1, peer: peer, host: "localhost",
				header: map[string]string{"Authorization": auth}})
			if rec.Code != http.StatusUnauthorized || problemType(rec) != "unauthorized" ||
				!strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("Authorization %q from %s: %d %s; want 401 unauthorized with WWW-Authenticate", auth, peer, rec.Code, rec.Body)
			}
			if strings.Contains(rec.Body.String(), "s3cret") {
				t.Errorf("the refusal shows the token: %s", rec.Body)
			}
		}
	}
	f.untouched(t, "forgets without the token")
	rec := f.do(req{method: http.MethodPost, path: "forget", body: forgetC1, peer: "10.0.0.7:5555", host: "payments.internal:9091",
		header: map[string]string{"Authorization": "Bearer s3cret-t0ken"}})
	if rec.Code != http.StatusOK {
		t.Fatalf("forget with the token from another machine: %d %s", rec.Code, rec.Body)
	}
}

// Defect: a page on another origin made the browser forget a key with a
// text/plain form (no preflight). A request made for a page (Origin,
// Sec-Fetch-Site) is refused whatever its origin, and a POST body must be
// application/json.
func TestDoorRefusesBrowsersAndForms(t *testing.T) {
	f := newDoorFixture(t, idemadmin.HandlerOptions{})
	loop := req{method: http.MethodPost, path: "forget", body: forgetC1, peer: "127.0.0.1:5555", host: "127.0.0.1:9091"}
	for _, tc := range []struct {
		header map[string]string
		status int
		typ    string
	}{
		{map[string]string{"Origin": "http://evil.example"}, 403, "forbidden"},
		{map[string]string{"Origin": "null"}, 403, "forbidden"},
		{map[string]string{"Origin": "http://127.0.0.1:9091"}, 403, "forbidden"}, // even its own origin
		{map[string]string{"Sec-Fetch-Site": "cross-site"}, 403, "forbidden"},
		{map[string]string{"Sec-Fetch-Site": "same-site"}, 403, "forbidden"},
		{map[string]string{"Sec-Fetch-Site": "same-origin"}, 403, "forbidden"},
		{map[string]string{"Content-Type": "text/plain"}, 415, "bad-request"},
		{map[string]string{"Content-Type": "text/plain;charset=UTF-8"}, 415, "bad-request"},
		{map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415, "bad-request"},
		{map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, 415, "bad-request"},
		{map[string]string{"Content-Type": ""}, 415, "bad-request"},
		{map[string]string{"Content-Type": "application/json; charset=latin1"}, 415, "bad-request"},
	} {
		r := loop
		r.header = tc.header
		if rec := f.do(r); rec.Code != tc.status || problemType(rec) != tc.typ {
			t.Errorf("forget with %v: %d %s; want %d %s", tc.header, rec.Code, rec.Body, tc.status, tc.typ)
		}
		f.untouched(t, fmt.Sprint("forget with ", tc.header))
	}
	loop.header = map[string]string{"Content-Type": "application/json; charset=utf-8"}
	if rec := f.do(loop); rec.Code != http.StatusOK {
		t.Fatalf("forget as application/json; charset=utf-8: %d %s", rec.Code, rec.Body)
	}
}

// Defect: the handler took trailing garbage, two concatenated objects (the
// second ignored), and an empty POST to /purge purged. A body is exactly
// one JSON object.
func TestDoorTakesOneJSONObject(t *testing.T) {
	f := newDoorFixture(t, idemadmin.HandlerOptions{})
	for _, tc := range []struct{ path, body string }{
		{"forget", forgetC1 + `x`},
		{"forget", forgetC1 + `{"scope":"acct_1","key":"old"}`},
		{"forget", forgetC1 + "\n" + forgetC1},
		{"forget", `[` + forgetC1 + `]`},
		{"forget", `null`},
		{"forget", ``},
		{"forget", `"c-1"`},
		{"purge", ``},
		{"purge", `null`},
		{"purge", `{}{}`},
		{"purge", `{} x`},
		{"get", forgetC1 + `,`},
	} {
		rec := f.do(req{method: http.MethodPost, path: tc.path, body: tc.body, peer: "127.0.0.1:5555", host: "localhost"})
		if rec.Code != http.StatusBadRequest || problemType(rec) != "bad-request" {
			t.Errorf("%s %q: %d %s; want 400 bad-request", tc.path, tc.body, rec.Code, rec.Body)
		}
		f.untouched(t, tc.path+" "+tc.body)
	}
	if rec := f.do(req{method: http.MethodPost, path: "purge", body: " {} \n", peer: "127.0.0.1:5555", host: "localhost"}); rec.Code != http.StatusOK ||
		!strings.Contains(rec.Body.String(), `"purged":1`) {
		t.Fatalf("purge {}: %d %s; want the expired record purged", rec.Code, rec.Body)
	}
}

// failingStore fails every call with an error naming what a caller of the
// admin endpoint must not learn.
type failingStore struct{ idemadmin.Store }

var errSecretive = errors.New(`gormstore: forget: pq: password authentication failed for user "payments_admin" on db-7.internal (SQLSTATE 28P01)`)

func (failingStore) Inspect(context.Context, idem.ID) (idemadmin.Info, error) {
	return idemadmin.Info{}, errSecretive
}
func (failingStore) Forget(context.Context, idem.ID, bool) error { return errSecretive }
func (failingStore) RecordStats(context.Context, time.Time, int) (idemadmin.Stats, error) {
	return idemadmin.Stats{}, errSecretive
}
func (failingStore) Purge(context.Context, time.Time, int) (int, error) { return 0, errSecretive }

// Defect: the handler returned the store's errors verbatim (user names,
// database names, SQLSTATE). The caller is told that the store failed; the
// serving process's log has why.
func TestStoreErrorsStayInTheLog(t *testing.T) {
	var logs bytes.Buffer
	h := idemadmin.Handler(failingStore{}, idemadmin.HandlerOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for _, r := range []struct{ method, path, body string }{
		{"POST", "get", forgetC1}, {"POST", "forget", forgetC1}, {"GET", "stats", ""}, {"POST", "purge", "{}"},
	} {
		logs.Reset()
		hr := httptest.NewRequest(r.method, "http://127.0.0.1/idemadmin/"+r.path, strings.NewReader(r.body))
		hr.RemoteAddr = "127.0.0.1:4000"
		hr.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, hr)
		if rec.Code != http.StatusServiceUnavailable || problemType(rec) != "store-error" {
			t.Errorf("%s: %d %s; want 503 store-error", r.path, rec.Code, rec.Body)
		}
		for _, secret := range []string{"payments_admin", "db-7", "SQLSTATE", "pq:", "password"} {
			if strings.Contains(rec.Body.String(), secret) {
				t.Errorf("%s: the answer shows the store's error (%q): %s", r.path, secret, rec.Body)
			}
		}
		if !strings.Contains(logs.String(), "SQLSTATE 28P01") {
			t.Errorf("%s: the store's error is not in the log:\n%s", r.path, logs.String())
		}
	}
}

// Defect: a forget left no trace of what was forgotten, or by whom. Every
// forget and purge writes an audit line: the scope's and key's keyed
// hashes (the key's as the Engine's lines show it under the same secret),
// the peer, and the outcome; never the scope or key in clear.
func TestAuditLines(t *testing.T) {
	secret := []byte("fleet-secret")
	f := newDoorFixture(t, idemadmin.HandlerOptions{Secret: secret})
	loop := func(path, body string) *httptest.ResponseRecorder {
		return f.do(req{method: http.MethodPost, path: path, body: body, peer: "127.0.0.1:43210", host: "localhost"})
	}
	loop("forget", `{"scope":"acct_1","key":"missing"}`)
	loop("forget", forgetC1)
	loop("purge", `{"batch":10}`)
	lines := strings.Split(strings.TrimSpace(f.logs.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d log lines, want an audit line per forget and purge:\n%s", len(lines), f.logs)
	}
	scope := "scope_hash=" + idemadmin.ScopeLabel(secret, idemadmin.ScopeDigest("acct_1"))
	for i, want := range [][]string{
		{"msg=\"idemadmin forget\"", scope, "key_hash=" + idemadmin.KeyHash(secret, "missing"), "peer=127.0.0.1:43210", "outcome=not-found", "force=false"},
		{"msg=\"idemadmin forget\"", scope, "key_hash=" + idemadmin.KeyHash(secret, "c-1"), "peer=127.0.0.1:43210", "outcome=forgotten"},
		{"msg=\"idemadmin purge\"", "purged=1", "peer=127.0.0.1:43210", "outcome=purged"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i], w) {
				t.Errorf("audit line %d lacks %s:\n%s", i+1, w, lines[i])
			}
		}
	}
	for _, clear := range []string{"acct_1", "c-1", "missing"} {
		if strings.Contains(f.logs.String(), clear) {
			t.Errorf("the audit lines show %q in clear:\n%s", clear, f.logs)
		}
	}
	if got := idemadmin.KeyHash(secret, "c-1"); len(got) != 12 {
		t.Errorf("KeyHash = %q, want 12 hex digits as the Engine's key_hash", got)
	}
}

// TestKeyHashIsTheEngines: under the Engine's KeyHashSecret, an audit
// line's key_hash is the one the Engine's events carry for that key.
func TestKeyHashIsTheEngines(t *testing.T) {
	secret := []byte("fleet-secret")
	var got string
	e := idem.New(idem.Config{Store: memstore.New(), KeyHashSecret: secret,
		OnEvent: func(_ context.Context, ev idemevent.Event) { got = ev.KeyHash() }})
	d := e.Adapter().Begin(context.Background(), exchange.Request{Method: "POST", Path: "/", KeyLines: []string{`"order-7"`}})
	if d.Lock != nil {
		d.Lock.Finish(context.Background(), 201, nil)
	}
	if want := idemadmin.KeyHash(secret, "order-7"); got != want {
		t.Fatalf("the Engine's key hash %q, the handler's %q", got, want)
	}
}
