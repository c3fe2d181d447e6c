package memstore_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

// stepped returns the reading a clock would give at t had its wall clock
// been stepped by step: the wall reading moved, the monotonic one not. No
// exported API builds such a value (Add moves both readings alike), so the
// monotonic word of t is copied into t.Add(step) by hand; the checks fail
// the test, rather than let it pass vacuously, if time.Time ever changes
// its layout or t carries no monotonic reading.
func stepped(tb testing.TB, t time.Time, step time.Duration) time.Time {
	tb.Helper()
	type words struct {
		wall uint64
		ext  int64 // the monotonic reading, when there is one
		loc  *time.Location
	}
	s := t.Add(step)
	(*words)(unsafe.Pointer(&s)).ext = (*words)(unsafe.Pointer(&t)).ext
	if s.Sub(t) != 0 || s.UnixNano()-t.UnixNano() != int64(step) {
		tb.Fatalf("cannot model a clock step: monotonic difference %v, wall difference %v",
			s.Sub(t), time.Duration(s.UnixNano()-t.UnixNano()))
	}
	return s
}

// A step of the wall clock changes nothing a single process reckons: the
// Engine's times come from time.Now, whose monotonic reading the store must
// use. A +1 h step while a handler ran let a retry take its key over (the
// handler ran twice); a -1 h step kept a lapsed lease alive for an hour.
func TestLeasesFollowTheMonotonicClock(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(memstore.WithPurgeInterval(0))
	const lease = 30 * time.Second
	acquire := func(id idem.ID, token string, now time.Time) (idem.Record, idem.AcquireOutcome, error) {
		return s.Acquire(ctx, idem.Acquire{ID: id, Token: token, Now: now,
			LeaseUntil: now.Add(lease), ExpiresAt: now.Add(24 * time.Hour)})
	}
	t0 := time.Now()

	running := idem.ID{Scope: "acct", Key: "running"}
	if _, outcome, err := acquire(running, "first", t0); err != nil || outcome != idem.AcquireCreated {
		t.Fatal(outcome, err)
	}
	// 10 ms later by the monotonic clock, the wall clock jumps an hour ahead.
	later := stepped(t, t0.Add(10*time.Millisecond), time.Hour)
	rec, outcome, err := acquire(running, "retry", later)
	if err != nil || outcome != idem.AcquireExisting || rec.Token != "first" {
		t.Fatalf("retry 10 ms into a 30 s lease, after a +1 h wall-clock step: %v (token %q), %v; want existing, first",
			outcome, rec.Token, err)
	}
	if !rec.LeaseUntil.After(later) {
		t.Fatalf("record's lease ends %v, before the retry's now %v", rec.LeaseUntil, later)
	}
	if n, err := s.Purge(ctx, later, 100); err != nil || n != 0 {
		t.Fatalf("Purge after the step deleted %d records (%v); want 0", n, err)
	}
	if err := s.Renew(ctx, running, "first", later.Add(lease)); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, running, "first", idem.Completion{Response: exchange.Response{Status: 201},
		CompletedAt: later, ExpiresAt: later.Add(24 * time.Hour)}); err != nil {
		t.Fatal(err)
	}

	lapsed := idem.ID{Scope: "acct", Key: "lapsed"}
	if _, outcome, err := acquire(lapsed, "first", t0); err != nil || outcome != idem.AcquireCreated {
		t.Fatal(outcome, err)
	}
	// 31 s later by the monotonic clock, the wall clock has been set back an
	// hour: the lease has run out all the same.
	rec, outcome, err = acquire(lapsed, "retry", stepped(t, t0.Add(lease+time.Second), -time.Hour))
	if err != nil || outcome != idem.AcquireTookOver || rec.Token != "retry" {
		t.Fatalf("retry 31 s into a 30 s lease, after a -1 h wall-clock step: %v (token %q), %v; want took-over, retry",
			outcome, rec.Token, err)
	}
}

// An Engine whose clock gives times without a monotonic reading
// (Config.Now returning time.Now().UTC(), say) has its records reckoned on
// the wall clock, while the purger's own clock, time.Now, carries one. The
// wall clock is set back two hours: the Engine's times then lie two hours
// behind the monotonic clock, and a purger reckoning by it deleted each
// record two hours early. Here, with a TTL of one hour, the record of a
// completed request was gone at the purger's first pass, and its retry ran
// the handler again; and an in-flight record whose handler was still
// running went too, so that a retry ran the handler beside it.
func TestPurgerNeverAheadOfTheEngine(t *testing.T) {
	const step = -2 * time.Hour
	engineNow := func() time.Time { return stepped(t, time.Now(), step).UTC() }
	var passes atomic.Int64
	purgerNow := func() time.Time { // time.Now, after the step
		passes.Add(1)
		return stepped(t, time.Now(), step)
	}
	s := memstore.New(memstore.WithPurgeInterval(time.Millisecond), memstore.WithClock(idemtest.ClockOf(purgerNow)))
	defer s.Close()
	engine := idem.New(idem.Config{Store: s, Clock: idemtest.ClockOf(engineNow), TTL: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	var runs sync.Map // key -> *atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(idemhttp.Middleware(engine)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		n, _ := runs.LoadOrStore(key, new(atomic.Int32))
		if n.(*atomic.Int32).Add(1) == 1 && key == "running" {
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	post := func(key string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	runsOf := func(key string) int32 {
		n, ok := runs.Load(key)
		if !ok {
			return 0
		}
		return n.(*atomic.Int32).Load()
	}

	if code := post("done"); code != http.StatusCreated {
		t.Fatalf("first request: %d", code)
	}
	running := make(chan int, 1)
	go func() { running <- post("running") }()
	for runsOf("running") == 0 {
		time.Sleep(time.Millisecond)
	}
	// A few passes of the purger.
	for from, deadline := passes.Load(), time.Now().Add(10*time.Second); passes.Load() < from+5; {
		if time.Now().After(deadline) {
			t.Fatalf("the purger made %d passes in 10 s, want 5 (it runs every millisecond)", passes.Load()-from)
		}
		time.Sleep(time.Millisecond)
	}
	if code := post("running"); code != http.StatusConflict || runsOf("running") != 1 {
		t.Errorf("retry while the handler runs: %d after %d runs; want 409, one run", code, runsOf("running"))
	}
	close(release)
	if code := <-running; code != http.StatusCreated {
		t.Fatalf("the running request: %d", code)
	}
	if code := post("done"); code != http.StatusCreated || runsOf("done") != 1 {
		t.Errorf("retry of the completed request: %d after %d runs; want its replay, one run", code, runsOf("done"))
	}
}
