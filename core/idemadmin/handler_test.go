package idemadmin_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemadmin"
	"github.com/idemkit/idemkit/core/memstore"
)

// TestHandlerOnMemstore drives every operation of the handler through the
// Client, on the memory store: get, stats, forget refused in flight and
// fenced with force, forget of a completed record, purge.
func TestHandlerOnMemstore(t *testing.T) {
	store := memstore.New(memstore.WithPurgeInterval(0))
	defer store.Close()
	// A time without a monotonic reading, as a time sent over the wire is:
	// the store reckons it by the wall clock, so the times it reports come
	// back exact. With time.Now's monotonic reading the store keeps the
	// monotonic offset from its start, and the wall time it reports back
	// can differ from the caller's by however far the wall clock was
	// slewed meanwhile (a few hundred nanoseconds failed this test).
	now := time.Now().Round(0)
	secret := []byte("test-secret")
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.String())
		idemadmin.Handler(store, idemadmin.HandlerOptions{Now: func() time.Time { return now }, Secret: secret}).ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := idemadmin.NewClient(srv.URL+"/idemadmin/", "", nil)
	ctx := context.Background()

	held := idem.ID{Scope: "tenant-a", Key: "k-held"}
	done := idem.ID{Scope: "tenant-a", Key: "k-done"}
	old := idem.ID{Scope: "tenant-b", Key: "k-old"}
	acquire := func(id idem.ID, token string, at time.Time) {
		t.Helper()
		if _, o, err := store.Acquire(ctx, idem.Acquire{ID: id, Token: token, Now: at, LeaseUntil: at.Add(time.Minute),
			ExpiresAt: at.Add(time.Hour)}); err != nil || o != idem.AcquireCreated {
			t.Fatalf("Acquire: %v %v", o, err)
		}
	}
	complete := func(id idem.ID, token string, at time.Time) {
		t.Helper()
		if err := store.Complete(ctx, id, token, idem.Completion{Response: exchange.Response{Status: 201,
			Header: []exchange.HeaderField{{Name: "Content-Type", Values: []string{"application/json"}}}, Body: []byte(`{"ok":1}`)},
			CompletedAt: at, ExpiresAt: at.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	acquire(held, "h1", now)
	acquire(done, "d1", now)
	complete(done, "d1", now)
	acquire(old, "o1", now.Add(-3*time.Hour))
	complete(old, "o1", now.Add(-3*time.Hour))

	in, err := c.Inspect(ctx, done)
	if err != nil || in.State != "completed" || in.Status != 201 || string(in.Body) != `{"ok":1}` || in.BodySize != 8 ||
		len(in.HeaderNames) != 1 || in.Expired {
		t.Fatalf("Inspect(done) = %+v, %v", in, err)
	}
	if in, err := c.Inspect(ctx, old); err != nil || !in.Expired {
		t.Fatalf("Inspect(old) = %+v, %v; want it expired by the handler's clock", in, err)
	}
	if _, err := c.Inspect(ctx, idem.ID{Key: "nope"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Inspect(missing): %v", err)
	}
	st, err := c.RecordStats(ctx, time.Time{}, 1)
	if err != nil || st.Completed != 2 || st.InFlight != 1 || st.Expired != 1 || !st.OldestLeaseEnd.Equal(now.Add(time.Minute)) ||
		len(st.TopScopes) != 1 || st.TopScopes[0] != (idemadmin.ScopeCount{Scope: idemadmin.ScopeLabel(secret, idemadmin.ScopeDigest("tenant-a")), Records: 2}) {
		t.Fatalf("RecordStats = %+v, %v", st, err)
	}

	if err := c.Forget(ctx, held, false); !errors.Is(err, idemadmin.ErrInFlight) {
		t.Fatalf("Forget(in flight): %v; want ErrInFlight", err)
	}
	if err := c.Forget(ctx, held, true); err != nil {
		t.Fatal(err)
	}
	if err := store.Complete(ctx, held, "h1", idem.Completion{CompletedAt: now, ExpiresAt: now.Add(time.Hour)}); !errors.Is(err, idem.ErrLockLost) {
		t.Fatalf("Complete by the forgotten holder: %v; want ErrLockLost", err)
	}
	if err := c.Forget(ctx, done, false); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, done); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Get after Forget: %v", err)
	}
	if n, err := c.Purge(ctx, time.Time{}, 10); err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want the expired record", n, err)
	}
	if store.Len() != 0 {
		t.Fatalf("%d records left", store.Len())
	}
	for _, p := range paths {
		if strings.Contains(p, "k-") || strings.Contains(p, "tenant") {
			t.Fatalf("a scope or key went in a URL: %s", p)
		}
	}
}

// changingStore is a store whose every record changes between Forget's
// read and its delete: Forget deletes nothing and says so.
type changingStore struct{ *memstore.Store }

func (changingStore) Forget(context.Context, idem.ID, bool) error { return idemadmin.ErrChanged }

// TestHandlerForgetChanged: a Forget that found the record changed after
// its read (idemadmin.ErrChanged) reaches the operator as that error, a
// 409 "changed" problem on the wire: not a store failure, which would say
// to try again later, nor a success.
func TestHandlerForgetChanged(t *testing.T) {
	store := memstore.New(memstore.WithPurgeInterval(0))
	defer store.Close()
	srv := httptest.NewServer(idemadmin.Handler(changingStore{store}, idemadmin.HandlerOptions{}))
	defer srv.Close()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/forget", strings.NewReader(`{"scope":"a","key":"k","force":true}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), idemadmin.ProblemBase+"changed") {
		t.Fatalf("forget of a record that changed: %d %s, want 409 %schanged", resp.StatusCode, body, idemadmin.ProblemBase)
	}
	c := idemadmin.NewClient(srv.URL+"/", "", nil)
	if err := c.Forget(context.Background(), idem.ID{Scope: "a", Key: "k"}, true); !errors.Is(err, idemadmin.ErrChanged) {
		t.Fatalf("the client's Forget of a record that changed: %v, want ErrChanged", err)
	}
}

// TestHandlerRefusesBadRequests: a bad request is a problem with a type of
// its own, never a store call.
func TestHandlerRefusesBadRequests(t *testing.T) {
	h := idemadmin.Handler(memstore.New(memstore.WithPurgeInterval(0)), idemadmin.HandlerOptions{})
	for _, tc := range []struct {
		method, path, body string
		status             int
		typ                string
	}{
		{"POST", "/x/get", `{"scope":"a"}`, 400, "bad-request"},
		{"POST", "/x/get", `{"key":"a","nope":1}`, 400, "bad-request"},
		{"POST", "/x/get", `[`, 400, "bad-request"},
		{"GET", "/x/get", ``, 405, "bad-request"},
		{"POST", "/x/stats", ``, 405, "bad-request"},
		{"GET", "/x/stats?top=-1", ``, 400, "bad-request"},
		{"POST", "/x/purge", `{"batch":-1}`, 400, "bad-request"},
		{"GET", "/x/other", ``, 404, "bad-request"},
		{"POST", "/x/forget", `{"key":"missing"}`, 404, "not-found"},
	} {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(tc.method, "http://localhost"+tc.path, strings.NewReader(tc.body))
		r.RemoteAddr = "127.0.0.1:4000"
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, r)
		if rec.Code != tc.status || rec.Header().Get("Content-Type") != exchange.ProblemContentType ||
			!strings.Contains(rec.Body.String(), `"type":"`+idemadmin.ProblemBase+tc.typ+`"`) {
			t.Errorf("%s %s %s: %d %s; want %d, problem %s", tc.method, tc.path, tc.body, rec.Code, rec.Body, tc.status, tc.typ)
		}
	}
}

// TestShown: what operators are shown of a store's counts: scopes by their
// keyed label, and a store that takes no leases said to take none, not a
// lease ending a century ahead.
func TestShown(t *testing.T) {
	now := time.Now()
	secret := []byte("s")
	st := idemadmin.Shown(idemadmin.Stats{InFlight: 1, OldestInFlight: now, OldestLeaseEnd: now.Add(idem.MaxDuration),
		TopScopes: []idemadmin.ScopeCount{{Scope: idemadmin.ScopeDigest("acct_42"), Records: 3}, {Scope: idemadmin.UnknownScope, Records: 1}}}, secret)
	if !st.NoLease || !st.OldestLeaseEnd.IsZero() || st.TopScopes[0].Scope != idemadmin.ScopeLabel(secret, idemadmin.ScopeDigest("acct_42")) ||
		len(st.TopScopes[0].Scope) != 16 || st.TopScopes[1].Scope != idemadmin.UnknownScope {
		t.Fatalf("Shown = %+v", st)
	}
	if st := idemadmin.Shown(idemadmin.Stats{InFlight: 1, OldestInFlight: now, OldestLeaseEnd: now.Add(30 * time.Second)}, secret); st.NoLease ||
		!st.OldestLeaseEnd.Equal(now.Add(30*time.Second)) {
		t.Fatalf("Shown of a 30 s lease = %+v", st)
	}
	if idemadmin.ScopeLabel([]byte("a"), "x") == idemadmin.ScopeLabel([]byte("b"), "x") {
		t.Fatal("ScopeLabel does not depend on the secret")
	}
	in := idemadmin.NewInfo(idem.Record{State: idem.InFlight, CreatedAt: now, LeaseUntil: now.Add(idem.MaxDuration), ExpiresAt: now.Add(time.Hour)}, "")
	if !in.NoLease || !in.LeaseUntil.IsZero() || in.ExpiredAt(now.Add(2*time.Hour)) {
		t.Fatalf("NewInfo of a record without lease = %+v; want NoLease, and not expired past its ExpiresAt while in flight", in)
	}
}
