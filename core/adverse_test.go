package idem_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemtest"
)

// goClock is the test clock without its spawner: the renewer then starts
// its workers with the go statement, so that renewal calls really run at
// once, while timers and deadlines still move only with Advance.
type goClock struct{ c *idemtest.Clock }

func (g goClock) Now() time.Time                                 { return g.c.Now() }
func (g goClock) AfterFunc(d time.Duration, f func()) idem.Timer { return g.c.AfterFunc(d, f) }

// gatedRenewals holds every Renew until the gate opens, counting the calls
// waiting at it, and hangs the renewals of the keys in hang until their
// deadline.
type gatedRenewals struct {
	idem.Store
	gate    chan struct{}
	waiting atomic.Int64
	renewed sync.Map // key -> renewals that reached the store
	hang    map[string]bool
}

func (s *gatedRenewals) Renew(ctx context.Context, id idem.ID, token string, until time.Time) error {
	if s.hang[id.Key] {
		<-ctx.Done()
		return ctx.Err()
	}
	s.waiting.Add(1)
	<-s.gate
	s.waiting.Add(-1)
	err := s.Store.Renew(ctx, id, token, until)
	n, _ := s.renewed.LoadOrStore(id.Key, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
	return err
}

// eventually polls cond until it holds, failing the test after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s never happened", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Defect: renewals ran one after another, so 40 slow renewals took longer
// than a lease and retries ran handlers a second time. The renewals of a
// pass run at once, up to the workers' number.
func TestSlowRenewalsRunAtOnce(t *testing.T) {
	clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
	s := &gatedRenewals{Store: newStore(t), gate: make(chan struct{})}
	cfg := quietConfig(s)
	cfg.Clock, cfg.Lease, cfg.RenewEvery = goClock{clock}, 600*time.Millisecond, 150*time.Millisecond
	e := idem.New(cfg)
	var locks []exchange.Lock
	for i := range 40 {
		locks = append(locks, e.Adapter().Begin(context.Background(), *charge(fmt.Sprintf("k-%d", i), `{}`)).Lock)
	}
	clock.Advance(150 * time.Millisecond) // every renewal is due
	eventually(t, "32 renewals waiting on the store at once", func() bool { return s.waiting.Load() == 32 })
	close(s.gate)
	eventually(t, "every lease renewed", func() bool {
		n := 0
		s.renewed.Range(func(_, _ any) bool { n++; return true })
		return n == 40
	})
	for _, l := range locks {
		if err := l.Context().Err(); err != nil {
			t.Fatalf("a handler was told %v while its renewals were slow but on time", context.Cause(l.Context()))
		}
		l.Abandon(context.Background(), exchange.ReasonPanic)
	}
}

// Defect: a few renewals hanging until their deadline starved every other key.
func TestHangingRenewalsStarveNoOtherKey(t *testing.T) {
	clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
	gate := make(chan struct{})
	close(gate)
	s := &gatedRenewals{Store: newStore(t), gate: gate,
		hang: map[string]bool{"k-0": true, "k-1": true, "k-2": true, "k-3": true, "k-4": true}}
	cfg := quietConfig(s)
	cfg.Clock, cfg.Lease, cfg.RenewEvery = goClock{clock}, 600*time.Millisecond, 150*time.Millisecond
	a, b := idem.New(cfg), idem.New(cfg)
	var locks []exchange.Lock
	for i := range 12 {
		locks = append(locks, a.Adapter().Begin(context.Background(), *charge(fmt.Sprintf("k-%d", i), `{}`)).Lock)
	}
	renewals := func(key string) int64 {
		n, ok := s.renewed.Load(key)
		if !ok {
			return 0
		}
		return n.(*atomic.Int64).Load()
	}
	for round := int64(1); round <= 10; round++ { // 1.5 s: two and a half leases
		clock.Advance(150 * time.Millisecond)
		for i := 5; i < 12; i++ {
			key := fmt.Sprintf("k-%d", i)
			eventually(t, fmt.Sprintf("renewal %d of %s", round, key), func() bool { return renewals(key) >= round })
			if d := b.Adapter().Begin(context.Background(), *charge(key, `{}`)); d.Lock != nil {
				t.Fatalf("key %d was taken over while its holder ran: hanging renewals of other keys starved it", i)
			}
		}
	}
	// The five whose renewals hung were told their lease is lost.
	for i, l := range locks[:5] {
		if cause := context.Cause(l.Context()); !errors.Is(cause, idem.ErrLeaseLost) {
			t.Fatalf("key %d: handler context cause %v, want ErrLeaseLost", i, cause)
		}
	}
	for _, l := range locks {
		l.Abandon(context.Background(), exchange.ReasonPanic)
	}
}

// gatedComplete holds Complete until its gate opens.
type gatedComplete struct {
	idem.Store
	entered, gate chan struct{}
}

func (s *gatedComplete) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	s.entered <- struct{}{}
	<-s.gate
	return s.Store.Complete(ctx, id, token, c)
}

// Defect: renewals stopped before Complete ran, so a Complete slower than
// the lease let a retry run the handler again.
func TestSlowCompleteKeepsTheLease(t *testing.T) {
	clock := idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))
	store := &gatedComplete{Store: newStore(t), entered: make(chan struct{}, 1), gate: make(chan struct{})}
	cfg := quietConfig(store)
	cfg.Clock, cfg.Lease, cfg.RenewEvery, cfg.StoreTimeout = clock, 300*time.Millisecond, 75*time.Millisecond, time.Hour
	a, b := idem.New(cfg), idem.New(cfg)
	d := a.Adapter().Begin(context.Background(), *charge("k", `{}`))
	done := make(chan error, 1)
	go func() { done <- finish(t, d.Lock, `{"id":"first"}`) }()
	<-store.entered
	for range 12 { // three leases while Complete is being written
		clock.Advance(75 * time.Millisecond)
		if r := b.Adapter().Begin(context.Background(), *charge("k", `{}`)); r.Lock != nil {
			t.Fatal("a retry ran the handler while the first execution's completion was still being written")
		}
	}
	close(store.gate)
	if err := <-done; err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if r := b.Adapter().Begin(context.Background(), *charge("k", `{}`)); !r.Replayed || string(r.Response.Body) != `{"id":"first"}` {
		t.Fatalf("after the slow completion: %+v, want the first response replayed", r)
	}
}

// frozenStore never answers until its caller gives up.
type frozenStore struct{ idem.Store }

func (frozenStore) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	<-ctx.Done()
	return idem.Record{}, 0, ctx.Err()
}

func (frozenStore) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	<-ctx.Done()
	return ctx.Err()
}

func (frozenStore) Release(ctx context.Context, id idem.ID, token string) error {
	<-ctx.Done()
	return ctx.Err()
}

// Defect: Complete and Release ran with no deadline, Acquire only under the
// request's context: a frozen store hung requests for ever.
func TestFrozenStoreNeverHangsARequest(t *testing.T) {
	cfg := quietConfig(frozenStore{newStore(t)})
	cfg.StoreTimeout = 50 * time.Millisecond
	e := idem.New(cfg)
	returned := make(chan exchange.Decision, 1)
	go func() { returned <- e.Adapter().Begin(context.Background(), *charge("k", `{}`)) }()
	select {
	case d := <-returned:
		if d.Response.Status != 503 {
			t.Fatalf("Acquire on a frozen store: %+v, want 503", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Begin hung on a frozen store")
	}

	// A store that froze after the lock was taken.
	healthy := newStore(t)
	swap := &switchable{Store: healthy}
	cfg = quietConfig(swap)
	cfg.StoreTimeout = 50 * time.Millisecond
	d := idem.New(cfg).Adapter().Begin(context.Background(), *charge("k", `{}`))
	swap.frozen.Store(true)
	finished := make(chan error, 1)
	go func() { finished <- finish(t, d.Lock, `{}`) }()
	select {
	case err := <-finished:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Finish on a frozen store: %v, want a deadline error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Finish hung on a frozen store")
	}
}

type switchable struct {
	idem.Store
	frozen atomic.Bool
}

func (s *switchable) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	if s.frozen.Load() {
		return frozenStore{}.Complete(ctx, id, token, c)
	}
	return s.Store.Complete(ctx, id, token, c)
}

func (s *switchable) Release(ctx context.Context, id idem.ID, token string) error {
	if s.frozen.Load() {
		return frozenStore{}.Release(ctx, id, token)
	}
	return s.Store.Release(ctx, id, token)
}

// Defect: a body limit enforced outside idemkit (http.MaxBytesReader) gave
// 400 body-unreadable instead of 413.
func TestOutsideBodyLimitIs413(t *testing.T) {
	e := idem.New(quietConfig(newStore(t)))
	r := charge("k", "")
	r.Body = nil
	r.BodyReader = http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(strings.Repeat("x", 100))), 10)
	r.ContentLength = -1
	d := e.Adapter().Begin(context.Background(), *r)
	if d.Response.Status != 413 || !strings.Contains(string(d.Response.Body), exchange.ProblemPayloadTooLarge) {
		t.Fatalf("got %d %s, want 413 payload-too-large", d.Response.Status, d.Response.Body)
	}
}

// Defect: the header value slices of problems, Retry-After and the replay
// marker were shared between responses, so one middleware editing a value
// in place corrupted every later response.
func TestResponsesShareNoHeaderValues(t *testing.T) {
	e := idem.New(quietConfig(newStore(t)))
	d := e.Adapter().Begin(context.Background(), *charge("k", `{}`))
	if err := finish(t, d.Lock, `{}`); err != nil {
		t.Fatal(err)
	}
	held := e.Adapter().Begin(context.Background(), *charge("busy", `{}`))
	defer held.Lock.Abandon(context.Background(), exchange.ReasonPanic)
	responses := func() []*exchange.Decision {
		replay := e.Adapter().Begin(context.Background(), *charge("k", `{}`))
		conflict := e.Adapter().Begin(context.Background(), *charge("busy", `{}`))
		missing := e.Adapter().Begin(context.Background(), *charge("", `{}`))
		missing = e.Adapter().Begin(context.Background(), exchange.Request{Method: http.MethodPost, Path: "/"})
		return []*exchange.Decision{&replay, &conflict, &missing}
	}
	var want []http.Header
	for _, d := range responses() {
		w := httptest.NewRecorder()
		d.WriteTo(w)
		want = append(want, w.Header().Clone())
		for _, vs := range w.Header() {
			for i := range vs {
				vs[i] = "scribbled" // what a careless outer middleware might do
			}
		}
	}
	for i, d := range responses() {
		w := httptest.NewRecorder()
		d.WriteTo(w)
		for name, vs := range want[i] {
			if got := w.Header()[name]; strings.Join(got, ",") != strings.Join(vs, ",") {
				t.Fatalf("response %d header %s = %q after an earlier response was edited, want %q", i, name, got, vs)
			}
		}
	}
}

// Defect: the Engine cancelled nothing when the store said another request
// had taken the key: the handler ran on unaware.
func TestLeaseLostCancelsHandlerContext(t *testing.T) {
	cfg := quietConfig(renewFails{newStore(t), idem.ErrLockLost})
	cfg.Lease, cfg.RenewEvery = time.Second, 20*time.Millisecond
	d := idem.New(cfg).Adapter().Begin(context.Background(), *charge("k", `{}`))
	defer d.Lock.Abandon(context.Background(), exchange.ReasonPanic)
	held, ok := idem.HeldKey(d.Lock.Context())
	if !ok || held.ID.Key != "k" || held.Token == "" {
		t.Fatalf("HeldKey = %+v, %v", held, ok)
	}
	select {
	case <-d.Lock.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context was never cancelled")
	}
	if cause := context.Cause(d.Lock.Context()); !errors.Is(cause, idem.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", cause)
	}
}

// A body limit enforced by the framework, before the request reaches
// idemkit, must answer the problem the Engine answers for its own limit:
// BodyTooLarge is that problem, type, title, headers and detail alike.
func TestBodyTooLargeIsBeginsProblem(t *testing.T) {
	cfg := quietConfig(newStore(t))
	cfg.MaxRequestBody, cfg.ProblemBase = 10, "https://errors.example/"
	e := idem.New(cfg)
	d := e.Adapter().Begin(context.Background(), *charge("k", strings.Repeat("x", 11)))
	if d.Action != exchange.Respond || d.Response.Status != 413 {
		t.Fatalf("Begin: action %v, status %d; want a 413", d.Action, d.Response.Status)
	}
	got := e.Adapter().BodyTooLarge(10)
	if !reflect.DeepEqual(got, d.Response) {
		t.Fatalf("BodyTooLarge(10) = %d %v %s\nBegin answered %d %v %s",
			got.Status, got.Header, got.Body, d.Response.Status, d.Response.Header, d.Response.Body)
	}
	other := e.Adapter().BodyTooLarge(4 << 20)
	if !strings.Contains(string(other.Body), `"type":"https://errors.example/payload-too-large"`) ||
		!strings.Contains(string(other.Body), "4194304 bytes") {
		t.Fatalf("BodyTooLarge(4 MiB) = %s: want the configured type and the limit it was given", other.Body)
	}
}
