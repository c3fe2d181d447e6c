package idemtest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/memstore"
)

// A small kit for an adapter's own tests, beside the suites: the pieces
// every adapter's framework-specific tests need.

// NewEngine returns an Engine on a fresh memory store, quiet, with configure
// applied to its Config; the store is closed when tb ends.
func NewEngine(tb testing.TB, configure ...func(*idem.Config)) *idem.Engine {
	store := memstore.New(memstore.WithPurgeInterval(0))
	tb.Cleanup(func() { store.Close() })
	cfg := idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler)}
	for _, f := range configure {
		f(&cfg)
	}
	return idem.New(cfg)
}

// CompletionsFail returns s with every Complete failing with err, for a
// test of what an entry point does with an outcome that was not recorded:
// a store that went away while the work ran (any error), another run that
// holds the key (idem.ErrLockLost), or work undone with its record
// (idem.ErrRolledBack). Every other call reaches s.
func CompletionsFail(s idem.Store, err error) idem.Store { return failingCompletions{s, err} }

type failingCompletions struct {
	idem.Store
	err error
}

func (s failingCompletions) Complete(context.Context, idem.ID, string, idem.Completion) error {
	return s.err
}

// Outcomes returns a configuration for NewEngine that reports the end of
// every lock (EventStored and EventNotStored), so a test can wait for a
// key's release instead of racing it: a hijacked or streamed response
// reaches the client before its handler returns.
func Outcomes() (func(*idem.Config), <-chan idemevent.Event) {
	ch := make(chan idemevent.Event, 16)
	return func(c *idem.Config) {
		c.OnEvent = func(_ context.Context, ev idemevent.Event) {
			if ev.Kind == idemevent.Stored || ev.Kind == idemevent.NotStored {
				select { // a test that stopped reading holds no request for long
				case ch <- ev:
				case <-time.After(10 * time.Second):
				}
			}
		}
	}, ch
}

// WantOutcome waits for the next outcome from Outcomes and checks it.
func WantOutcome(t *testing.T, events <-chan idemevent.Event, kind idemevent.Kind, reason exchange.Reason) {
	t.Helper()
	select {
	case ev := <-events:
		if ev.Kind != kind || ev.Reason != reason {
			t.Fatalf("outcome %s (reason %q), want %s (reason %q)", ev.Kind, ev.Reason, kind, reason)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s event", kind)
	}
}

// suiteClient is the client of the suites' own requests: bounded, so that
// a server that never answers fails a test with a message instead of
// holding it until the test binary's deadline.
var suiteClient = &http.Client{Timeout: 10 * time.Second}

// Response is what Post got back.
type Response struct {
	Status int
	Header http.Header
	Body   string
}

// Replayed reports whether the response is a replay.
func (r Response) Replayed() bool { return r.Header.Get(exchange.ReplayedHeader) == "true" }

// Post sends a JSON POST to url. An empty key sends no Idempotency-Key;
// header holds extra name, value pairs.
func Post(t *testing.T, url, key, body string, header ...string) Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(idem.DefaultHeaderName, key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := suiteClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return Response{resp.StatusCode, resp.Header, string(b)}
}

// WantStored sends retry after first and checks that it was replayed
// (stored) or ran the handler again (not stored), calls counting the
// handler's runs. It returns the retry's response.
func WantStored(t *testing.T, first Response, retry func() Response, stored bool, calls *atomic.Int64) Response {
	t.Helper()
	before := calls.Load()
	second := retry()
	ran := calls.Load() - before
	if first.Replayed() {
		t.Fatalf("first response is marked replayed: %v", first.Header)
	}
	if second.Status != first.Status {
		t.Fatalf("retry status %d, want %d as the first", second.Status, first.Status)
	}
	switch {
	case stored && (!second.Replayed() || second.Body != first.Body || ran != 0):
		t.Fatalf("want a replay of %q; got replayed=%v %q, handler ran %d more times", first.Body, second.Replayed(), second.Body, ran)
	case !stored && (second.Replayed() || ran != 1):
		t.Fatalf("want the handler to run again; got replayed=%v, handler ran %d more times", second.Replayed(), ran)
	}
	return second
}

// WantScopedByAuth checks a server whose POST url runs behind the
// application's authentication, which reads "Authorization: Bearer
// <account>" and answers 401 without it, and then idemkit, scoped by the
// account the authentication found. calls counts the handler's runs. An
// unauthenticated request never reaches idemkit; two accounts sending one
// key get two fresh runs; each account's retry replays its own answer.
func WantScopedByAuth(t *testing.T, url string, calls *atomic.Int64) {
	t.Helper()
	if r := Post(t, url, "k1", `{"amount":1}`); r.Status != http.StatusUnauthorized {
		t.Fatalf("unauthenticated: %d, want 401", r.Status)
	}
	a := Post(t, url, "k1", `{"amount":1}`, "Authorization", "Bearer acct_a")
	b := Post(t, url, "k1", `{"amount":2}`, "Authorization", "Bearer acct_b")
	if a.Status != 201 || b.Status != 201 || a.Replayed() || b.Replayed() || calls.Load() != 2 {
		t.Fatalf("two accounts, one key: %d %d (replayed %v %v), %d runs; want two fresh 201s",
			a.Status, b.Status, a.Replayed(), b.Replayed(), calls.Load())
	}
	for _, c := range []struct {
		account, body string
		first         Response
	}{{"acct_a", `{"amount":1}`, a}, {"acct_b", `{"amount":2}`, b}} {
		retry := func() Response {
			return Post(t, url, "k1", c.body, "Authorization", "Bearer "+c.account)
		}
		WantStored(t, c.first, retry, true, calls)
	}
}
