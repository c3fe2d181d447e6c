package idem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

func newStore(t *testing.T) *memstore.Store {
	s := memstore.New(memstore.WithPurgeInterval(0))
	t.Cleanup(func() { s.Close() })
	return s
}

func quietConfig(s idem.Store) idem.Config {
	return idem.Config{Store: s, Logger: slog.New(slog.DiscardHandler)}
}

func charge(key, body string) *exchange.Request {
	return &exchange.Request{Method: http.MethodPost, Path: "/v1/charges?expand=customer", KeyLines: []string{key},
		ContentType: "application/json", Body: []byte(body)}
}

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// finish writes body into the lock and completes it with status 201.
func finish(t *testing.T, l exchange.Lock, body string) error {
	t.Helper()
	l.Write([]byte(body))
	return recorded(l.Finish(context.Background(), 201, header("Content-Type", "application/json")))
}

// recorded is nil for a Lock's end that recorded its response, and an
// error saying what became of it otherwise (wrapping ErrLockLost for
// LockLost).
func recorded(f exchange.Finished) error {
	switch f.Outcome {
	case exchange.Recorded:
		return nil
	case exchange.LockLost:
		return fmt.Errorf("%v (%s): %w", f.Outcome, f.Reason, idem.ErrLockLost)
	}
	return fmt.Errorf("%v (%s): %w", f.Outcome, f.Reason, f.Err)
}

func TestRenewalKeepsSlowHandlerLocked(t *testing.T) {
	cfg := quietConfig(newStore(t))
	clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
	cfg.Clock, cfg.Lease, cfg.RenewEvery = clock, 150*time.Millisecond, 25*time.Millisecond
	e := idem.New(cfg)
	d := e.Adapter().Begin(context.Background(), *charge("slow", `{}`))
	if d.Lock == nil {
		t.Fatalf("first request: %+v, want a lock", d)
	}
	// The handler runs for several leases; renewals keep the key.
	for range 4 {
		clock.Advance(100 * time.Millisecond)
		if r := e.Adapter().Begin(context.Background(), *charge("slow", `{}`)); r.Action != exchange.Respond || r.Response.Status != 409 {
			t.Fatalf("retry while the slow handler runs: %+v, want 409", r)
		}
	}
	if err := finish(t, d.Lock, `{"id":1}`); err != nil {
		t.Fatal(err)
	}
	if r := e.Adapter().Begin(context.Background(), *charge("slow", `{}`)); !r.Replayed || string(r.Response.Body) != `{"id":1}` {
		t.Fatalf("after completion: %+v, want the replay", r)
	}
}

// killable stands for another process's connection to a shared store: kill
// makes every call fail, as when that process dies.
type killable struct {
	idem.Store
	dead atomic.Bool
}

var errDead = errors.New("process is dead")

func (k *killable) Renew(ctx context.Context, id idem.ID, token string, until time.Time) error {
	if k.dead.Load() {
		return errDead
	}
	return k.Store.Renew(ctx, id, token, until)
}

func TestCrashedHolderIsFencedOff(t *testing.T) {
	store := newStore(t)
	clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
	var events []idemevent.Kind
	var mu sync.Mutex
	record := func(_ context.Context, ev idemevent.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev.Kind)
	}
	first := &killable{Store: store}
	cfg1 := quietConfig(first)
	cfg1.Clock = clock
	cfg2 := quietConfig(store)
	cfg2.Clock, cfg2.OnEvent = clock, record
	e1, e2 := idem.New(cfg1), idem.New(cfg2)

	d1 := e1.Adapter().Begin(context.Background(), *charge("pay-1", `{"amount":5}`))
	if d1.Lock == nil {
		t.Fatal("first instance did not get the lock")
	}
	first.dead.Store(true) // the first instance stops renewing
	clock.Advance(e1.Config().Lease - time.Second)
	if d := e2.Adapter().Begin(context.Background(), *charge("pay-1", `{"amount":5}`)); d.Action != exchange.Respond || d.Response.Status != 409 {
		t.Fatalf("within the lease: %+v, want 409", d)
	}
	clock.Advance(time.Second)
	d2 := e2.Adapter().Begin(context.Background(), *charge("pay-1", `{"amount":5}`))
	if d2.Lock == nil {
		t.Fatalf("after the lease: %+v, want a takeover", d2)
	}
	// The first instance comes back and tries to store its response.
	if err := finish(t, d1.Lock, `{"from":"first"}`); !errors.Is(err, idem.ErrLockLost) {
		t.Fatalf("stale holder's Finish = %v, want ErrLockLost", err)
	}
	if err := finish(t, d2.Lock, `{"from":"second"}`); err != nil {
		t.Fatal(err)
	}
	d := e2.Adapter().Begin(context.Background(), *charge("pay-1", `{"amount":5}`))
	if !d.Replayed || string(d.Response.Body) != `{"from":"second"}` {
		t.Fatalf("replay = %+v, want the new holder's response", d)
	}
	want := []idemevent.Kind{idemevent.Conflict, idemevent.Takeover, idemevent.Stored, idemevent.Replay}
	mu.Lock()
	defer mu.Unlock()
	if !slicesEqual(events, want) {
		t.Fatalf("events %v, want %v", events, want)
	}
}

func slicesEqual[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEventsCoverEveryDecision(t *testing.T) {
	var got []idemevent.Event
	cfg := quietConfig(newStore(t))
	cfg.MaxRequestBody = 64
	cfg.OnEvent = func(_ context.Context, ev idemevent.Event) { got = append(got, ev) }
	e := idem.New(cfg)
	ctx := context.Background()

	d := e.Adapter().Begin(ctx, *charge("k1", `{"a":1}`))
	finish(t, d.Lock, "{}")
	e.Adapter().Begin(ctx, *charge("k1", `{"a":1}`))
	e.Adapter().Begin(ctx, *charge("k1", `{"a":2}`))
	held := e.Adapter().Begin(ctx, *charge("k2", `{}`))
	e.Adapter().Begin(ctx, *charge("k2", `{}`))
	held.Lock.Finish(ctx, 503, nil)
	panicked := e.Adapter().Begin(ctx, *charge("k3", `{}`))
	panicked.Lock.Abandon(ctx, exchange.ReasonPanic)
	e.Adapter().Begin(ctx, exchange.Request{Method: http.MethodPost, Path: "/v1/charges"})
	e.Adapter().Begin(ctx, *charge(`"bad`, `{}`))
	e.Adapter().Begin(ctx, *charge("k4", strings.Repeat("x", 65)))
	e.Adapter().Begin(ctx, exchange.Request{Method: http.MethodGet, Path: "/v1/charges", KeyLines: []string{"k1"}})

	want := []struct {
		kind   idemevent.Kind
		status int
		reason exchange.Reason
	}{
		{idemevent.First, 0, ""}, {idemevent.Stored, 201, ""}, {idemevent.Replay, 201, ""},
		{idemevent.Mismatch, 422, ""}, {idemevent.First, 0, ""}, {idemevent.Conflict, 409, ""},
		{idemevent.NotStored, 503, exchange.ReasonStatus}, {idemevent.First, 0, ""},
		{idemevent.NotStored, 0, exchange.ReasonPanic}, {idemevent.KeyMissing, 400, ""},
		{idemevent.KeyInvalid, 400, ""}, {idemevent.TooLarge, 413, ""},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		ev := got[i]
		if ev.Kind != w.kind || ev.Status != w.status || ev.Reason != w.reason {
			t.Errorf("event %d = %v/%d/%q, want %v/%d/%q", i, ev.Kind, ev.Status, ev.Reason, w.kind, w.status, w.reason)
		}
		if ev.Route != "/v1/charges" || ev.Method != http.MethodPost {
			t.Errorf("event %d route %q %q: want POST /v1/charges without the query", i, ev.Method, ev.Route)
		}
	}
	if h := got[0].KeyHash(); len(h) != 12 || strings.Contains(h, "k1") || h != got[2].KeyHash() || h == got[4].KeyHash() {
		t.Errorf("key hashes %q %q %q: want 12 hex digits, stable per key", h, got[2].KeyHash(), got[4].KeyHash())
	}
}

func TestStoreErrorFailsClosed(t *testing.T) {
	var kinds []idemevent.Kind
	cfg := quietConfig(brokenStore{})
	cfg.OnEvent = func(_ context.Context, ev idemevent.Event) { kinds = append(kinds, ev.Kind) }
	d := idem.New(cfg).Adapter().Begin(context.Background(), *charge("k", `{}`))
	if d.Action != exchange.Respond || d.Response.Status != 503 || d.Lock != nil {
		t.Fatalf("decision %+v, want 503", d)
	}
	if d.Response.Get("Retry-After") != "1" {
		t.Fatalf("503 headers %v, want Retry-After", d.Response.Header)
	}
	if len(kinds) != 1 || kinds[0] != idemevent.StoreError {
		t.Fatalf("events %v", kinds)
	}
}

type brokenStore struct{ idem.Store }

func (brokenStore) Acquire(context.Context, idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	return idem.Record{}, 0, errors.New("connection refused")
}

func (brokenStore) Release(context.Context, idem.ID, string) error {
	return errors.New("connection refused")
}

func TestFinishStoresAfterClientLeft(t *testing.T) {
	e := idem.New(quietConfig(newStore(t)))
	ctx, cancel := context.WithCancel(context.Background())
	d := e.Adapter().Begin(ctx, *charge("k", `{}`))
	cancel() // the client disconnects while the handler runs
	d.Lock.Write([]byte("done"))
	if err := recorded(d.Lock.Finish(ctx, 200, nil)); err != nil {
		t.Fatal(err)
	}
	if r := e.Adapter().Begin(context.Background(), *charge("k", `{}`)); !r.Replayed || string(r.Response.Body) != "done" {
		t.Fatalf("retry after the client left: %+v, want the replay", r)
	}
}

func TestResponseOverLimitIsReleased(t *testing.T) {
	cfg := quietConfig(newStore(t))
	cfg.MaxResponseBody = 10
	e := idem.New(cfg)
	d := e.Adapter().Begin(context.Background(), *charge("k", `{}`))
	d.Lock.Write([]byte("0123456"))
	d.Lock.Write([]byte("789A"))
	if f := d.Lock.Finish(context.Background(), 200, nil); f.Outcome != exchange.NotRecorded || f.Reason != exchange.ReasonTooLarge || f.Err != nil {
		t.Fatalf("Finish of a response over the limit: %+v, want it not recorded as too large", f)
	}
	if r := e.Adapter().Begin(context.Background(), *charge("k", `{}`)); r.Lock == nil {
		t.Fatalf("retry after an oversized response: %+v, want to run again", r)
	}
}

func TestStoredHeadersAreFiltered(t *testing.T) {
	cfg := quietConfig(newStore(t))
	cfg.ReplayHeaders = []string{"x-request-id", "Set-Cookie", "connection"}
	e := idem.New(cfg)
	d := e.Adapter().Begin(context.Background(), *charge("k", `{}`))
	d.Lock.Finish(context.Background(), 201, header("Content-Type", "application/json", "Location", "/v1/charges/1",
		"X-Request-Id", "r1", "Set-Cookie", "a=b", "Connection", "close", "Authorization", "Bearer x", "X-Other", "o"))
	r := e.Adapter().Begin(context.Background(), *charge("k", `{}`))
	want := []string{"Content-Type", "application/json", "Location", "/v1/charges/1", "X-Request-Id", "r1"}
	if len(r.Response.Header) != len(want)/2 {
		t.Fatalf("replayed headers %v, want %v", r.Response.Header, want)
	}
	for i, f := range r.Response.Header {
		if f.Name != want[2*i] || len(f.Values) != 1 || f.Values[0] != want[2*i+1] || cap(f.Values) != 1 {
			t.Fatalf("header %d = %s %q (cap %d), want %s %q clipped", i, f.Name, f.Values, cap(f.Values), want[2*i], want[2*i+1])
		}
	}
}

func TestDebugLogsNeverCarryKeyOrBody(t *testing.T) {
	var buf bytes.Buffer
	cfg := quietConfig(newStore(t))
	cfg.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := idem.New(cfg)
	d := e.Adapter().Begin(context.Background(), *charge("secret-key-123", `{"card":"4242424242424242"}`))
	finish(t, d.Lock, `{"ok":true}`)
	e.Adapter().Begin(context.Background(), *charge("secret-key-123", `{"card":"4242424242424242"}`))
	out := buf.String()
	for _, secret := range []string{"secret-key-123", "4242", "expand=customer"} {
		if strings.Contains(out, secret) {
			t.Fatalf("log contains %q:\n%s", secret, out)
		}
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 debug lines (first, stored, replay), got:\n%s", out)
	}
	for i, name := range []string{"first", "stored", "replay"} {
		var m map[string]any
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil || m["event"] != name || m["key_hash"] == nil {
			t.Fatalf("line %d = %s, want event %s with a key hash", i, lines[i], name)
		}
	}
}

func TestNoGoroutineOutlivesRequests(t *testing.T) {
	cfg := quietConfig(newStore(t))
	clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
	// Renewal workers on goroutines of their own, as with the system clock.
	cfg.Clock, cfg.Lease, cfg.RenewEvery = goClock{clock}, idem.MinLease, time.Millisecond
	e := idem.New(cfg)
	before := runtime.NumGoroutine()
	var locks []exchange.Lock
	for i := range 50 {
		locks = append(locks, e.Adapter().Begin(context.Background(), *charge(strings.Repeat("k", i+1), `{}`)).Lock)
	}
	clock.Advance(5 * time.Millisecond) // renewals run meanwhile
	var wg sync.WaitGroup
	for i, l := range locks {
		wg.Go(func() {
			if i%2 == 0 {
				l.Finish(context.Background(), 201, nil)
			} else {
				l.Abandon(context.Background(), exchange.ReasonStreamed)
			}
		})
	}
	wg.Wait()
	clock.Advance(time.Millisecond) // the renewer's next pass finds nothing held and stops
	// Renewal workers end once the queue is empty; give a loaded machine
	// time to schedule them.
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines: %d before, %d 5 s after all locks ended", before, runtime.NumGoroutine())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNewWithoutStorePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New without a store did not panic")
		}
	}()
	idem.New(idem.Config{})
}

// renewFails answers every renewal with err.
type renewFails struct {
	idem.Store
	err error
}

func (s renewFails) Renew(context.Context, idem.ID, string, time.Time) error { return s.err }

func TestRenewalProblemsAreEvents(t *testing.T) {
	for _, c := range []struct {
		err  error
		want idemevent.Kind
	}{
		{idem.ErrLockLost, idemevent.LeaseLost},
		{errors.New("connection reset"), idemevent.RenewError}, // not store-error: no request was refused
	} {
		t.Run(c.want.String(), func(t *testing.T) {
			events := make(chan idemevent.Event, 16)
			cfg := quietConfig(renewFails{newStore(t), c.err})
			cfg.Lease, cfg.RenewEvery = time.Second, 5*time.Millisecond
			cfg.OnEvent = func(_ context.Context, ev idemevent.Event) {
				select { // renewals keep failing; never block the renewer
				case events <- ev:
				default:
				}
			}
			d := idem.New(cfg).Adapter().Begin(context.Background(), *charge("k", `{}`))
			if (<-events).Kind != idemevent.First {
				t.Fatal("no first event")
			}
			select {
			case ev := <-events:
				if ev.Kind != c.want || ev.Route != "/v1/charges" || ev.KeyHash() == "" {
					t.Fatalf("renewal event %+v, want %v", ev, c.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("no %v event", c.want)
			}
			d.Lock.Abandon(context.Background(), exchange.ReasonPanic)
		})
	}
}

// ownWriterStore blocks renewals until the request completes, as SQLite
// does when the request itself holds the database's only write lock in the
// transaction that Complete commits.
type ownWriterStore struct {
	idem.Store
	renewing  chan struct{} // closed when the first renewal is waiting
	committed chan struct{} // closed by Complete
	once      sync.Once
}

func (s *ownWriterStore) Renew(ctx context.Context, id idem.ID, token string, until time.Time) error {
	s.once.Do(func() { close(s.renewing) })
	<-s.committed // ignores ctx, like a busy wait inside the database driver
	return s.Store.Renew(ctx, id, token, until)
}

func (s *ownWriterStore) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	err := s.Store.Complete(ctx, id, token, c)
	close(s.committed)
	return err
}

func TestFinishDoesNotWaitForABlockedRenewal(t *testing.T) {
	store := &ownWriterStore{Store: newStore(t), renewing: make(chan struct{}), committed: make(chan struct{})}
	cfg := quietConfig(store)
	cfg.Lease, cfg.RenewEvery = 3*time.Second, 10*time.Millisecond
	e := idem.New(cfg)
	d := e.Adapter().Begin(context.Background(), *charge("k", `{}`))
	select {
	case <-store.renewing:
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal started")
	}
	done := make(chan error, 1)
	go func() { done <- finish(t, d.Lock, `{"ok":true}`) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Finish waited for a renewal that waits for Finish")
	}
	if r := e.Adapter().Begin(context.Background(), *charge("k", `{}`)); !r.Replayed {
		t.Fatalf("after Finish: %+v, want the replay", r)
	}
}

// writeThenFailStore's Acquire takes effect and then reports an error, as
// a SQL store does when the connection drops before the reply arrives.
type writeThenFailStore struct {
	idem.Store
	fail atomic.Bool
}

func (s *writeThenFailStore) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	rec, outcome, err := s.Store.Acquire(ctx, a)
	if s.fail.Load() {
		return idem.Record{}, 0, errors.New("read tcp 127.0.0.1:5432: connection reset by peer")
	}
	return rec, outcome, err
}

// TestFailedAcquireLeavesNoOrphan: a record written by an Acquire that then
// failed is released at once, so the retry runs instead of waiting a lease
// behind 409s.
func TestFailedAcquireLeavesNoOrphan(t *testing.T) {
	store := &writeThenFailStore{Store: newStore(t)}
	e := idem.New(quietConfig(store))
	store.fail.Store(true)
	if d := e.Adapter().Begin(context.Background(), *charge(`"orphan"`, `{"amount":1}`)); d.Action != exchange.Respond || d.Response.Status != 503 {
		t.Fatalf("failed Acquire: action %v status %d, want a 503 problem", d.Action, d.Response.Status)
	}
	if _, err := store.Get(context.Background(), idem.ID{Key: "orphan"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("record after the failed Acquire: %v, want it released (ErrNotFound)", err)
	}
	store.fail.Store(false)
	d := e.Adapter().Begin(context.Background(), *charge(`"orphan"`, `{"amount":1}`))
	if d.Action != exchange.Run {
		t.Fatalf("retry: action %v status %d, want Run", d.Action, d.Response.Status)
	}
	d.Lock.Finish(context.Background(), 201, nil)
}

// TestGoneClientCostsNoStoreCall: a request whose client left before
// Begin reached the store neither acquires nor releases anything.
func TestGoneClientCostsNoStoreCall(t *testing.T) {
	store := &countingStore{Store: newStore(t)}
	var kinds []idemevent.Kind
	cfg := quietConfig(store)
	cfg.OnEvent = func(_ context.Context, ev idemevent.Event) { kinds = append(kinds, ev.Kind) }
	e := idem.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d := e.Adapter().Begin(ctx, *charge(`"gone"`, `{"amount":1}`)); d.Action != exchange.Respond || d.Response.Status != 499 {
		t.Fatalf("action %v status %d, want %d", d.Action, d.Response.Status, 499)
	}
	if n := store.calls.Load(); n != 0 {
		t.Fatalf("%d store calls for a request whose client had gone, want 0", n)
	}
	if !slices.Equal(kinds, []idemevent.Kind{idemevent.ClientGone}) {
		t.Fatalf("events %v, want client-gone alone", kinds)
	}
}

// answersLate holds Acquire until released, then lets the store answer:
// a healthy store still at work when the client hangs up.
type answersLate struct {
	idem.Store
	entered, release chan struct{}
}

func (s answersLate) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	close(s.entered)
	<-s.release
	return s.Store.Acquire(ctx, a)
}

// Defect: a client that hung up while Acquire ran counted as a store
// error (the event operators page on) and was logged at ERROR. A store
// that answers is no fault: the request is client-gone, and the key it
// took is given back.
func TestClientGoneIsNoStoreError(t *testing.T) {
	var kinds []idemevent.Kind
	var logs bytes.Buffer
	store := answersLate{Store: newStore(t), entered: make(chan struct{}), release: make(chan struct{})}
	cfg := quietConfig(store)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.OnEvent = func(_ context.Context, ev idemevent.Event) { kinds = append(kinds, ev.Kind) }
	e := idem.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-store.entered
		cancel()
		close(store.release)
	}()
	d := e.Adapter().Begin(ctx, *charge(`"hung-up"`, `{"amount":1}`))
	if d.Action != exchange.Respond || d.Response.Status != 499 {
		t.Fatalf("action %v status %d, want %d", d.Action, d.Response.Status, 499)
	}
	if !slices.Equal(kinds, []idemevent.Kind{idemevent.ClientGone}) {
		t.Fatalf("events %v, want client-gone alone (no store-error)", kinds)
	}
	if logs.Len() != 0 {
		t.Fatalf("logged at INFO or above: %s", logs.String())
	}
	if _, err := store.Get(context.Background(), idem.ID{Key: "hung-up"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("the key taken for the client that left: %v, want it released", err)
	}
}

// frozen never answers Acquire: it waits for its call's context, as a
// store stopped with SIGSTOP keeps a call waiting until its deadline.
type frozen struct {
	idem.Store
	entered chan struct{}
}

func (s frozen) Acquire(ctx context.Context, _ idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	close(s.entered)
	<-ctx.Done()
	return idem.Record{}, 0, fmt.Errorf("redis: %w", ctx.Err())
}

// Defect: with the store frozen and clients that give up before
// StoreTimeout (curl -m 2, a 5 s StoreTimeout), every request counted as
// client-gone and its store call as cancelled: no store-error, and no page.
// A store call that runs into StoreTimeout is a store fault whoever left
// first; with FailOpen, nothing runs for the client that left.
func TestFrozenStoreIsAStoreFaultWhoeverLeftFirst(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprint("failOpen=", failOpen), func(t *testing.T) {
			var events []idemevent.Event
			var logs bytes.Buffer
			clock := idemtest.NewClock(time.Now())
			store := frozen{Store: newStore(t), entered: make(chan struct{})}
			cfg := quietConfig(store)
			cfg.Clock, cfg.FailOpen = clock, failOpen
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			cfg.OnEvent = func(_ context.Context, ev idemevent.Event) { events = append(events, ev) }
			e := idem.New(cfg)
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				<-store.entered
				cancel() // the client gives up, long before StoreTimeout
				clock.Advance(e.Config().StoreTimeout)
			}()
			d := e.Adapter().Begin(ctx, *charge(`"frozen"`, `{"amount":1}`))
			if d.Action != exchange.Respond || d.Response.Status != 503 {
				t.Fatalf("action %v status %d, want a 503 (which nobody reads) and nothing run", d.Action, d.Response.Status)
			}
			if len(events) != 1 || events[0].Kind != idemevent.StoreError || events[0].StoreCall != "acquire" ||
				!errors.Is(events[0].Err, context.DeadlineExceeded) {
				t.Fatalf("events %+v, want store-error alone, its acquire run into StoreTimeout", events)
			}
			if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "StoreTimeout") {
				t.Fatalf("log: %s; want the store's error at ERROR", logs.String())
			}
		})
	}
}

type countingStore struct {
	idem.Store
	calls atomic.Int64
}

func (s *countingStore) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	s.calls.Add(1)
	return s.Store.Acquire(ctx, a)
}

func (s *countingStore) Release(ctx context.Context, id idem.ID, token string) error {
	s.calls.Add(1)
	return s.Store.Release(ctx, id, token)
}

// Defect: a TTL near math.MaxInt64, or reaching past 2262, overflowed the
// stores' clocks so that every record expired at once, and a Lease too
// short for the renewer answered every request 503; New accepted both.
func TestNewRefusesDurationsOutOfRange(t *testing.T) {
	store := newStore(t)
	for _, c := range []struct {
		name  string
		cfg   idem.Config
		field string // named by the panic; "" if New must accept the config
	}{
		{"TTL max int64", idem.Config{TTL: math.MaxInt64}, "Config.TTL"},
		{"TTL 250 years", idem.Config{TTL: 250 * 365 * 24 * time.Hour}, "Config.TTL"},
		{"TTL MaxDuration", idem.Config{TTL: idem.MaxDuration}, ""},
		{"Lease max int64", idem.Config{Lease: math.MaxInt64}, "Config.Lease"},
		{"Lease 2ms", idem.Config{Lease: 2 * time.Millisecond}, "Config.Lease"},
		{"Lease below MinLease", idem.Config{Lease: idem.MinLease - 1}, "Config.Lease"},
		{"Lease MinLease", idem.Config{Lease: idem.MinLease}, ""},
		{"Lease MaxDuration", idem.Config{Lease: idem.MaxDuration}, ""},
		{"zero values take the defaults", idem.Config{}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				p := recover()
				msg, _ := p.(string)
				switch {
				case c.field == "" && p != nil:
					t.Fatalf("New panicked: %v", p)
				case c.field != "" && !strings.Contains(msg, c.field):
					t.Fatalf("New: panic %v, want one naming %s and its range", p, c.field)
				}
			}()
			c.cfg.Store = store
			idem.New(c.cfg)
		})
	}
}

// A team that requires UUID keys refuses any other with its own detail,
// as 400 key-invalid; keys it accepts run as usual.
func TestValidateKey(t *testing.T) {
	cfg := quietConfig(newStore(t))
	cfg.ValidateKey = func(key string) error {
		if len(key) != 36 || strings.Count(key, "-") != 4 {
			return errors.New("keys must be UUIDs")
		}
		return nil
	}
	e := idem.New(cfg)
	d := e.Adapter().Begin(context.Background(), *charge(`"order-48213"`, `{}`))
	if d.Action != exchange.Respond || d.Response.Status != 400 || !bytes.Contains(d.Response.Body, []byte("keys must be UUIDs")) ||
		!bytes.Contains(d.Response.Body, []byte(exchange.ProblemKeyInvalid)) {
		t.Fatalf("a key the validator refuses: %d %s, want 400 key-invalid with its detail", d.Response.Status, d.Response.Body)
	}
	d = e.Adapter().Begin(context.Background(), *charge(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{}`))
	if d.Action != exchange.Run {
		t.Fatalf("a key the validator accepts: %+v, want it run", d)
	}
	d.Lock.Finish(context.Background(), 201, nil)
}
