package loadgen

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// keyServer answers like an idempotent endpoint: 201 for a new key, 200
// with Idempotent-Replayed for a completed one, 409 for a key in flight.
// It records what it saw so tests can check each workload's keys.
type keyServer struct {
	mu       sync.Mutex
	state    map[string]int // 1 in flight, 2 completed
	order    []string       // keys in arrival order
	noKey    int
	bodies   map[string]bool
	inFlight int // requests that found their key in flight
	hold     time.Duration
}

func (s *keyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.bodies[string(body)] = true
	if key == "" {
		s.noKey++
		s.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	s.order = append(s.order, key)
	st := s.state[key]
	if st == 0 {
		s.state[key] = 1
	}
	if st == 1 {
		s.inFlight++
	}
	s.mu.Unlock()
	switch st {
	case 1:
		w.WriteHeader(http.StatusConflict)
	case 2:
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":1}`))
	default:
		time.Sleep(s.hold)
		s.mu.Lock()
		s.state[key] = 2
		s.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":1}`))
	}
}

func run(t *testing.T, w Workload, conns, max int, hold time.Duration) (*keyServer, Result) {
	t.Helper()
	ks := &keyServer{state: map[string]int{}, bodies: map[string]bool{}, hold: hold}
	srv := httptest.NewServer(ks)
	t.Cleanup(srv.Close)
	res, err := Run(context.Background(), Config{
		Addr: strings.TrimPrefix(srv.URL, "http://"), Path: "/orders", KeyHeader: "Idempotency-Key",
		Body: []byte(`{"item":"book"}`), Workload: w, Conns: conns,
		Duration: time.Minute, MaxRequests: max, Prefix: 42,
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Requests != max {
		t.Errorf("measured %d requests, want exactly MaxRequests = %d", res.Requests, max)
	}
	if res.Errors != 0 {
		t.Errorf("%d connection errors", res.Errors)
	}
	if res.Latency.Count != res.Requests || res.Latency.P50 <= 0 || res.Latency.P99 < res.Latency.P50 ||
		res.Latency.Max < res.Latency.P99 {
		t.Errorf("latencies %+v do not describe %d samples", res.Latency, res.Requests)
	}
	if res.RPS <= 0 || res.Elapsed <= 0 {
		t.Errorf("RPS %v over %v", res.RPS, res.Elapsed)
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if len(ks.bodies) != 1 || !ks.bodies[`{"item":"book"}`] {
		t.Errorf("server got bodies %v, want only the configured one", ks.bodies)
	}
	return ks, res
}

func TestFirstSendsANewKeyEachRequest(t *testing.T) {
	ks, res := run(t, First, 4, 200, 0)
	seen := map[string]bool{}
	for _, k := range ks.order {
		if seen[k] {
			t.Fatalf("key %q sent twice", k)
		}
		seen[k] = true
		if len(k) != 36 {
			t.Fatalf("key %q is not UUID-sized", k)
		}
	}
	if res.Status[201] != 200 || res.Replayed != 0 {
		t.Errorf("statuses %v, replayed %d: want 200 x 201", res.Status, res.Replayed)
	}
}

func TestReplayPrimesOneKeyAndReplaysIt(t *testing.T) {
	ks, res := run(t, Replay, 3, 100, 0)
	for _, k := range ks.order {
		if k != ks.order[0] {
			t.Fatalf("keys %q and %q: Replay must send one key", ks.order[0], k)
		}
	}
	if len(ks.order) < 101 {
		t.Errorf("server saw %d requests, want the priming one plus 100", len(ks.order))
	}
	if res.Replayed != 100 || res.Status[201] != 100 {
		t.Errorf("statuses %v, replayed %d: every measured request must be a replay", res.Status, res.Replayed)
	}
}

func TestMixRetriesOnlyCompletedKeys(t *testing.T) {
	ks, res := run(t, Mix, 4, 1000, 0)
	if ks.inFlight != 0 {
		t.Errorf("%d retries of a key still in flight: Mix must retry completed keys only", ks.inFlight)
	}
	seen := map[string]bool{}
	retries := 0
	for _, k := range ks.order {
		if seen[k] {
			retries++
		}
		seen[k] = true
	}
	// 10% on average; the generator is seeded, so this is not a coin toss
	// per test run, and the bounds are wide.
	if retries < 50 || retries > 170 {
		t.Errorf("%d retries in %d requests, want about 10%%", retries, len(ks.order))
	}
	// Once MaxRequests are measured, the answers the other connections were
	// waiting for are not counted: at most one each.
	if d := retries - res.Replayed; d < 0 || d > 3 {
		t.Errorf("%d replayed responses for %d retries sent", res.Replayed, retries)
	}
}

func TestConflictSharesKeysAcrossConnections(t *testing.T) {
	const conns = 8
	ks, res := run(t, Conflict, conns, 400, 2*time.Millisecond)
	count := map[string]int{}
	for _, k := range ks.order {
		count[k]++
	}
	for k, n := range count {
		if n > conns {
			t.Errorf("key %q sent %d times, want at most one per connection (%d)", k, n, conns)
		}
	}
	if len(count) > 400/conns+conns {
		t.Errorf("%d distinct keys in %d requests: keys are not shared", len(count), len(ks.order))
	}
	if res.Status[409] == 0 {
		t.Errorf("statuses %v: with the handler holding each key 2 ms, some requests must find it in flight", res.Status)
	}
}

func TestNoKeySendsNoHeader(t *testing.T) {
	ks, res := run(t, NoKey, 2, 50, 0)
	if len(ks.order) != 0 || ks.noKey < 50 || res.Status[400] != 50 {
		t.Errorf("keys %d, requests without key %d, statuses %v", len(ks.order), ks.noKey, res.Status)
	}
}

func TestFixedRate(t *testing.T) {
	ks := &keyServer{state: map[string]int{}, bodies: map[string]bool{}}
	srv := httptest.NewServer(ks)
	defer srv.Close()
	var windows []bool
	res, err := Run(context.Background(), Config{
		Addr: strings.TrimPrefix(srv.URL, "http://"), Path: "/orders", KeyHeader: "Idempotency-Key",
		Body: []byte(`{}`), Workload: First, Conns: 2, Rate: 5000,
		Duration: time.Minute, MaxRequests: 40, Prefix: 1,
		OnWindow: func(open bool) { windows = append(windows, open) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 40 || res.Status[201] != 40 {
		t.Errorf("measured %d requests, statuses %v, want 40 x 201", res.Requests, res.Status)
	}
	if len(windows) != 2 || !windows[0] || windows[1] {
		t.Errorf("OnWindow calls %v, want [true false]", windows)
	}
}

func TestRunRefusesBadConfigAndDeadServer(t *testing.T) {
	if _, err := Run(context.Background(), Config{Addr: "127.0.0.1:1", Workload: First}); err == nil {
		t.Error("zero Conns and Duration accepted")
	}
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	if _, err := Run(context.Background(), Config{Addr: addr, Path: "/", Workload: First, Conns: 1,
		Duration: time.Second}); err == nil {
		t.Error("Run against a closed port succeeded")
	}
}

func TestParseWorkload(t *testing.T) {
	for _, w := range []Workload{First, Replay, Mix, Conflict, NoKey} {
		got, err := ParseWorkload(w.String())
		if err != nil || got != w {
			t.Errorf("ParseWorkload(%q) = %v, %v", w.String(), got, err)
		}
	}
	if _, err := ParseWorkload("Burst"); err == nil {
		t.Error("unknown workload accepted")
	}
}
