package idem_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

// Defect: an outage wrote one ERROR line per request (300 POSTs, 300
// lines). The first line of each kind of trouble is logged, the others
// held back and counted, and one line at the minute's end says how many.
func TestOutageLogsOneLineAMinute(t *testing.T) {
	var logs bytes.Buffer
	clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
	e := idem.New(idem.Config{Store: failingStore{}, Clock: clock,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	for i := range 300 {
		e.Adapter().Begin(context.Background(), *charge(fmt.Sprintf("k-%d", i), `{}`))
	}
	if n := strings.Count(logs.String(), "\n"); n != 1 {
		t.Fatalf("300 requests against a store that is down logged %d lines, want 1:\n%s", n, logs.String())
	}
	clock.Advance(time.Minute)
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "count=299") || !strings.Contains(lines[1], "event=store-error") ||
		!strings.Contains(lines[1], "level=ERROR") {
		t.Fatalf("after the minute: %q, want one ERROR line counting the 299 held back", lines)
	}
	e.Adapter().Begin(context.Background(), *charge("next", `{}`))
	if n := strings.Count(logs.String(), "\n"); n != 3 {
		t.Fatalf("the first error of the next minute was not logged:\n%s", logs.String())
	}
}

// Trouble logged at WARN is held back like ERROR's: a store that is full
// refuses every new key (one store-full event a request), a store that
// fails every renewal fails one a lease a renewal interval; each kind
// writes one WARN line, and one WARN line at the interval's end counting
// the others.
func TestWarningStormsLogOneLineAMinute(t *testing.T) {
	for _, c := range []struct {
		name  string
		event string
		store idem.Store
		locks bool // the requests run (and hold their leases)
	}{
		{"StoreFull", "store-full", fullStore{}, false},
		{"RenewalErrors", "renew-error", renewFails{bareStore{memstore.New(memstore.WithPurgeInterval(0))}, errUnreachable}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
			e := idem.New(idem.Config{Store: c.store, Clock: clock, Lease: time.Hour, RenewEvery: time.Second,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
			var locks []exchange.Lock
			for i := range 50 {
				d := e.Adapter().Begin(context.Background(), *charge(fmt.Sprintf("k-%d", i), `{}`))
				if (d.Lock != nil) != c.locks {
					t.Fatalf("request %d: %+v", i, d)
				}
				if d.Lock != nil {
					locks = append(locks, d.Lock)
				}
			}
			for range 50 { // 50 s: 50 failed renewals of each of the 50 leases
				clock.Advance(time.Second)
			}
			lines := func() []string { return strings.Split(strings.TrimSpace(logs.String()), "\n") }
			if got := lines(); len(got) != 1 || !strings.Contains(got[0], "level=WARN") || !strings.Contains(got[0], "event="+c.event) {
				t.Fatalf("a storm of %s logged %d lines, want one WARN line:\n%s", c.event, len(got), logs.String())
			}
			clock.Advance(15 * time.Second) // the interval of the first line ends
			// One line counts those held back; the renewals that go on
			// failing begin the next interval with a line of their own.
			got := lines()
			if len(got) < 2 || len(got) > 3 || !strings.Contains(got[1], "level=WARN") || !strings.Contains(got[1], "event="+c.event) ||
				!strings.Contains(got[1], "count=") || strings.Contains(got[1], "count=0") {
				t.Fatalf("after the minute: %q, want one WARN line counting the %s events held back", got, c.event)
			}
			for _, l := range locks {
				l.Abandon(context.Background(), exchange.ReasonPanic)
			}
		})
	}
}

// fullStore is a store that refuses every new key: it is full.
type fullStore struct{ idem.Store }

func (fullStore) Acquire(context.Context, idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	return idem.Record{}, 0, idem.ErrStoreFull
}

// failingStore is a store that cannot be reached.
type failingStore struct{ idem.Store }

var errUnreachable = errors.New("dial tcp 10.0.0.5:5432: connect: connection refused")

func (failingStore) Acquire(context.Context, idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	return idem.Record{}, 0, errUnreachable
}

func (failingStore) Release(context.Context, idem.ID, string) error { return errUnreachable }

// Defect: a request that ran unprotected (FailOpen) gave the same
// store-error event as one refused with 503, so it could not be counted.
func TestFailOpenIsCountedApart(t *testing.T) {
	for _, open := range []bool{false, true} {
		var kinds []idemevent.Kind
		e := idem.New(idem.Config{Store: failingStore{}, FailOpen: open, Logger: slog.New(slog.DiscardHandler),
			OnEvent: func(_ context.Context, ev idemevent.Event) { kinds = append(kinds, ev.Kind) }})
		d := e.Adapter().Begin(context.Background(), *charge("k", `{}`))
		want := idemevent.StoreError
		if open {
			want = idemevent.Unprotected
		}
		if len(kinds) != 1 || kinds[0] != want || (d.Action == exchange.Pass) != open {
			t.Fatalf("FailOpen %v: events %v, action %v; want %v", open, kinds, d.Action, want)
		}
	}
}

type traceKey struct{}

// Defect: lease events were emitted with context.Background(), so a
// request's trace showed nothing of a lost lease; renewals reached the
// store with no request context either.
func TestLeaseEventsCarryTheRequestContext(t *testing.T) {
	clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
	seen := map[idemevent.Kind]any{}
	var renewCtx any
	store := &renewSpy{Store: newStore(t), ctxValue: &renewCtx}
	e := idem.New(idem.Config{Store: store, Clock: clock, Logger: slog.New(slog.DiscardHandler),
		OnEvent: func(ctx context.Context, ev idemevent.Event) { seen[ev.Kind] = ctx.Value(traceKey{}) }})
	ctx := context.WithValue(context.Background(), traceKey{}, "trace-1")
	d := e.Adapter().Begin(ctx, *charge("k", `{}`))
	clock.Advance(10 * time.Second) // a renewal
	store.fail = true
	clock.Advance(30 * time.Second) // renewals fail until the lease runs out
	for _, k := range []idemevent.Kind{idemevent.Renewed, idemevent.RenewError, idemevent.LeaseLost} {
		if seen[k] != "trace-1" {
			t.Errorf("%v was emitted without the request's context (value %v)", k, seen[k])
		}
	}
	if renewCtx != "trace-1" {
		t.Errorf("Renew got a context without the request's values (%v)", renewCtx)
	}
	d.Lock.Abandon(context.Background(), exchange.ReasonPanic)
}

type renewSpy struct {
	idem.Store
	ctxValue *any
	fail     bool
}

func (s *renewSpy) Renew(ctx context.Context, id idem.ID, token string, until time.Time) error {
	*s.ctxValue = ctx.Value(traceKey{})
	if s.fail {
		return errUnreachable
	}
	return s.Store.Renew(ctx, id, token, until)
}

// Defect: the key hash in logs was an unsalted SHA-256, so a guessable key
// (order-48213) was recovered by trying candidates. It is an HMAC under
// KeyHashSecret, random per process unless set.
func TestKeyHashNeedsTheSecret(t *testing.T) {
	hash := func(secret []byte) string {
		var got string
		e := idem.New(idem.Config{Store: newStore(t), KeyHashSecret: secret, Logger: slog.New(slog.DiscardHandler),
			OnEvent: func(_ context.Context, ev idemevent.Event) { got = ev.KeyHash() }})
		e.Adapter().Begin(context.Background(), *charge("order-48213", `{}`)).Lock.Abandon(context.Background(), exchange.ReasonPanic)
		return got
	}
	plain := sha256.Sum256([]byte("order-48213"))
	if a := hash(nil); a == hex.EncodeToString(plain[:6]) || a == hash(nil) {
		t.Fatalf("without a secret the hash is %s: want neither the plain SHA-256 nor the same in two processes", a)
	}
	secret := []byte("fleet secret")
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("order-48213"))
	if got, want := hash(secret), hex.EncodeToString(m.Sum(nil)[:6]); got != want || hash(secret) != got {
		t.Fatalf("with a secret: %s, want %s, the same on every instance", got, want)
	}
}
