package idemclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemclient"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
)

// bank is the application behind idemkit in the fault tests: each charge it
// makes is a side effect that must happen once per logical request.
type bank struct {
	// failFirst makes the handler answer 503, making no charge, to the
	// first failFirst executions for each key.
	failFirst int
	// hold, if set, runs before the charge is made.
	hold func(r *http.Request)

	seq     atomic.Int64
	mu      sync.Mutex
	calls   map[string]int    // executions of the handler per key
	charges map[string]int    // charges made per key
	bodies  map[string]string // the response body of the charge per key
}

func newBank() *bank {
	return &bank{calls: map[string]int{}, charges: map[string]int{}, bodies: map[string]string{}}
}

func (b *bank) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	payload, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	b.calls[key]++
	call := b.calls[key]
	b.mu.Unlock()
	if call <= b.failFirst {
		http.Error(w, "ledger busy", http.StatusServiceUnavailable)
		return
	}
	if b.hold != nil {
		b.hold(r)
	}
	body := fmt.Sprintf(`{"charge":"ch_%d","request":%s}`, b.seq.Add(1), payload)
	b.mu.Lock()
	b.charges[key]++
	b.bodies[key] = body
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, body)
}

func (b *bank) state(key string) (calls, charges int, body string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[key], b.charges[key], b.bodies[key]
}

// faultMode is what a faulty wrapper does to the requests it hits.
type faultMode int

const (
	passAll     faultMode = iota
	dropAfter             // the request is processed, then the connection closed before the response
	resetAfter            // the request is processed, then the connection reset
	resetBefore           // the connection is reset before the request is processed
	unavailable           // 503 from in front of idemkit (a load balancer, an overloaded proxy)
)

// faulty sits in front of idemkit and spoils the first n attempts of every
// key, counting all attempts per key.
type faulty struct {
	t    testing.TB
	mode faultMode
	n    int
	next http.Handler

	mu   sync.Mutex
	seen map[string]int
}

func (f *faulty) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Idempotency-Key")
	f.mu.Lock()
	f.seen[key]++
	hit := f.seen[key] <= f.n
	f.mu.Unlock()
	if !hit || f.mode == passAll {
		f.next.ServeHTTP(w, r)
		return
	}
	switch f.mode {
	case unavailable:
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "upstream overloaded, try again")
	case resetBefore:
		f.kill(w, true)
	case dropAfter, resetAfter:
		// The response goes to a sink, never to the client.
		f.next.ServeHTTP(&sink{header: http.Header{}}, r)
		f.kill(w, f.mode == resetAfter)
	}
}

func (f *faulty) attempts(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[key]
}

// kill closes the client's connection without a response: with a FIN, or
// with an RST when reset is set.
func (f *faulty) kill(w http.ResponseWriter, reset bool) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		f.t.Errorf("hijack: %v", err)
		return
	}
	if tcp, ok := conn.(*net.TCPConn); ok && reset {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// sink is a ResponseWriter whose response nobody receives.
type sink struct {
	header http.Header
	body   bytes.Buffer
}

func (s *sink) Header() http.Header         { return s.header }
func (s *sink) WriteHeader(int)             {}
func (s *sink) Write(p []byte) (int, error) { return s.body.Write(p) }

// serve starts idemkit's net/http adapter with a memory store on a test
// server, in front of app, behind wrap (if not nil).
func serve(t *testing.T, app http.Handler, onEvent func(context.Context, idemevent.Event), wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	engine := idem.New(idem.Config{Store: store, OnEvent: onEvent, Logger: slog.New(slog.DiscardHandler)})
	h := idemhttp.Middleware(engine)(app)
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // hijacked and reset connections are expected
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// freshConnections sends every attempt on a new connection, so that each
// attempt is one server request: net/http's transport silently resends
// some requests that fail on a reused connection, which would hide attempts.
func freshConnections(t *testing.T) *http.Transport {
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

type answer struct {
	status int
	body   string
	out    idemclient.Result
}

func charge(client *http.Client, url string, n int) (answer, error) {
	resp, err := client.Post(url+"/v1/charges", "application/json", strings.NewReader(`{"n":`+strconv.Itoa(n)+`}`))
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	out, ok := idemclient.Outcome(resp)
	if !ok {
		return answer{}, errors.New("no Outcome on the response")
	}
	return answer{status: resp.StatusCode, body: string(b), out: out}, nil
}

func TestFaultsExecuteOncePerLogicalRequest(t *testing.T) {
	const logical = 8
	tests := []struct {
		name         string
		mode         faultMode
		faults       int
		failFirst    int
		wantAttempts int
		wantReplayed bool
		wantCalls    int // handler executions per key
	}{
		{"dropped response", dropAfter, 1, 0, 2, true, 1},
		{"dropped response twice", dropAfter, 2, 0, 3, true, 1},
		{"connection reset after processing", resetAfter, 1, 0, 2, true, 1},
		{"connection reset before processing", resetBefore, 1, 0, 2, false, 1},
		{"503 burst in front of idemkit", unavailable, 3, 0, 4, false, 1},
		{"503 burst from the handler", passAll, 0, 2, 3, false, 3},
		{"handler 503 lost in a connection reset", resetAfter, 1, 1, 2, false, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			app := newBank()
			app.failFirst = tt.failFirst
			var front *faulty
			srv := serve(t, app, nil, func(h http.Handler) http.Handler {
				front = &faulty{t: t, mode: tt.mode, n: tt.faults, next: h, seen: map[string]int{}}
				return front
			})
			clk := newFakeClock()
			client := idemclient.NewClient(idemclient.Config{Base: freshConnections(t), Now: clk.Now, Sleep: clk.Sleep})

			answers := make([]answer, logical)
			errs := make([]error, logical)
			var wg sync.WaitGroup
			for i := range logical {
				wg.Go(func() { answers[i], errs[i] = charge(client, srv.URL, i) })
			}
			wg.Wait()

			keys := map[string]bool{}
			for i, a := range answers {
				if errs[i] != nil {
					t.Errorf("request %d: %v", i, errs[i])
					continue
				}
				keys[a.out.Key] = true
				calls, charges, body := app.state(a.out.Key)
				if charges != 1 || calls != tt.wantCalls {
					t.Errorf("request %d: %d charges in %d executions, want 1 in %d", i, charges, calls, tt.wantCalls)
				}
				if a.status != http.StatusCreated || a.body != body {
					t.Errorf("request %d: got %d %s, want 201 %s", i, a.status, a.body, body)
				}
				if !strings.Contains(a.body, `"request":{"n":`+strconv.Itoa(i)+`}`) {
					t.Errorf("request %d: answer %s is another request's", i, a.body)
				}
				if a.out.Attempts != tt.wantAttempts || front.attempts(a.out.Key) != tt.wantAttempts {
					t.Errorf("request %d: %d attempts by Outcome, %d seen by the server; want %d",
						i, a.out.Attempts, front.attempts(a.out.Key), tt.wantAttempts)
				}
				if a.out.Replayed != tt.wantReplayed {
					t.Errorf("request %d: replayed %v, want %v", i, a.out.Replayed, tt.wantReplayed)
				}
			}
			if len(keys) != logical {
				t.Errorf("%d distinct keys for %d logical requests", len(keys), logical)
			}
			if got := app.seq.Load(); got != logical {
				t.Errorf("%d charges for %d logical requests", got, logical)
			}
		})
	}
}

// TestInFlightConflict: the first attempt is slow and times out on the
// client; the retry finds it still running and gets 409; the retry after
// Retry-After gets the replay of the first attempt's response.
func TestInFlightConflict(t *testing.T) {
	const logical = 3
	release := make([]chan struct{}, logical)
	releaseOnce := make([]sync.Once, logical)
	free := func(i int) { releaseOnce[i].Do(func() { close(release[i]) }) }
	stored := make([]chan struct{}, logical)
	for i := range logical {
		release[i], stored[i] = make(chan struct{}), make(chan struct{}, 1)
	}
	type clientID struct{}
	app := newBank()
	app.hold = func(r *http.Request) {
		select {
		case <-release[r.Context().Value(clientID{}).(int)]:
		case <-time.After(10 * time.Second): // a broken client never releases it: do not hang the server's Close
		}
	}
	var mu sync.Mutex
	events := make([][]idemevent.Kind, logical)
	onEvent := func(ctx context.Context, ev idemevent.Event) {
		id := ctx.Value(clientID{}).(int)
		mu.Lock()
		events[id] = append(events[id], ev.Kind)
		mu.Unlock()
		if ev.Kind == idemevent.Stored {
			select {
			case stored[id] <- struct{}{}:
			default:
			}
		}
	}
	srv := serve(t, app, onEvent, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, _ := strconv.Atoi(r.Header.Get("X-Client"))
			h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), clientID{}, id)))
		})
	})
	t.Cleanup(func() { // before the server's Close, which waits for held handlers
		for i := range logical {
			free(i)
		}
	})

	answers := make([]answer, logical)
	errs := make([]error, logical)
	waits := make([][]time.Duration, logical)
	var wg sync.WaitGroup
	for i := range logical {
		// The client's wait for Retry-After is where the slow first
		// attempt finishes: it is released, and the wait lasts until its
		// response is stored.
		sleep := func(ctx context.Context, d time.Duration) error {
			waits[i] = append(waits[i], d)
			if d != time.Second {
				return nil
			}
			free(i)
			select {
			case <-stored[i]:
				return nil
			case <-time.After(10 * time.Second):
				return errors.New("the first attempt was never stored")
			}
		}
		client := idemclient.NewClient(idemclient.Config{
			Base:           &headerRT{base: freshConnections(t), name: "X-Client", value: strconv.Itoa(i)},
			AttemptTimeout: time.Second, // long enough for the fast attempts on a loaded machine
			Sleep:          sleep,
			Random:         func() float64 { return 0 },
		})
		wg.Go(func() { answers[i], errs[i] = charge(client, srv.URL, i) })
	}
	wg.Wait()

	for i, a := range answers {
		if errs[i] != nil {
			t.Errorf("request %d: %v", i, errs[i])
			continue
		}
		calls, charges, body := app.state(a.out.Key)
		if charges != 1 || calls != 1 {
			t.Errorf("request %d: %d charges in %d executions, want 1 in 1", i, charges, calls)
		}
		if a.status != http.StatusCreated || a.body != body || !a.out.Replayed || a.out.Attempts != 3 {
			t.Errorf("request %d: %d %s, %+v; want the replayed 201 %s after 3 attempts", i, a.status, a.body, a.out, body)
		}
		if want := []time.Duration{0, time.Second}; !slices.Equal(waits[i], want) {
			t.Errorf("request %d: waits %v, want %v (a backoff after the timeout, then Retry-After)", i, waits[i], want)
		}
		mu.Lock()
		want := []idemevent.Kind{idemevent.First, idemevent.Conflict, idemevent.Stored, idemevent.Replay}
		if !slices.Equal(events[i], want) {
			t.Errorf("request %d: server events %v, want %v", i, events[i], want)
		}
		mu.Unlock()
	}
	if got := app.seq.Load(); got != logical {
		t.Errorf("%d charges for %d logical requests", got, logical)
	}
}

// headerRT adds a header to every request it sends.
type headerRT struct {
	base        http.RoundTripper
	name, value string
}

func (h *headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.name, h.value)
	return h.base.RoundTrip(r)
}

func TestNotRetriedAgainstIdemkit(t *testing.T) {
	app := newBank()
	var front *faulty
	srv := serve(t, app, nil, func(h http.Handler) http.Handler {
		front = &faulty{t: t, mode: passAll, next: h, seen: map[string]int{}}
		return front
	})
	clk := newFakeClock()
	client := idemclient.NewClient(idemclient.Config{Base: freshConnections(t), Now: clk.Now, Sleep: clk.Sleep})
	post := func(key, body string) (int, idemclient.Result) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		out, _ := idemclient.Outcome(resp)
		return resp.StatusCode, out
	}

	if status, _ := post(`"order-1"`, `{"amount":1}`); status != http.StatusCreated {
		t.Fatalf("first request: status %d", status)
	}
	tests := []struct {
		name, key, body string
		want            int
	}{
		{"422 key reused with another payload", `"order-1"`, `{"amount":2}`, http.StatusUnprocessableEntity},
		{"400 malformed key", `"unterminated`, `{"amount":3}`, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := front.attempts(tt.key)
			status, out := post(tt.key, tt.body)
			if status != tt.want || out.Attempts != 1 || front.attempts(tt.key)-before != 1 {
				t.Errorf("status %d after %d attempts (%d at the server), want %d after 1",
					status, out.Attempts, front.attempts(tt.key)-before, tt.want)
			}
		})
	}
	if len(clk.Slept()) != 0 {
		t.Errorf("waited %v, want no retry at all", clk.Slept())
	}
	if got := app.seq.Load(); got != 1 {
		t.Errorf("%d charges, want 1", got)
	}
}

// TestConnectionsReused: discarded answers are drained, so every attempt
// goes over the same kept-alive connection.
func TestConnectionsReused(t *testing.T) {
	app := newBank()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(nil)
	store := memstore.New()
	t.Cleanup(func() { store.Close() })
	engine := idem.New(idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	srv.Config.Handler = &faulty{t: t, mode: unavailable, n: 3, next: idemhttp.Middleware(engine)(app), seen: map[string]int{}}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	clk := newFakeClock()
	client := idemclient.NewClient(idemclient.Config{Base: tr, Now: clk.Now, Sleep: clk.Sleep})
	a, err := charge(client, srv.URL, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.status != http.StatusCreated || a.out.Attempts != 4 {
		t.Fatalf("status %d after %d attempts, want 201 after 4", a.status, a.out.Attempts)
	}
	if got := conns.Load(); got != 1 {
		t.Errorf("%d connections for 4 attempts, want 1", got)
	}
}
