package main

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/demo/payments/internal/webhook"
)

// Faults are the probabilities, each 0..1, that the proxy breaks a request.
type Faults struct {
	Reset float64 // reset the client's connection before forwarding: the server never sees the request
	Drop  float64 // forward, let the server finish, then reset the connection: the answer is lost
	// Delay holds the request back until the client has given up on it
	// and sent its retry, then forwards it beside that retry, detached
	// from the client: two copies of one request reach the server together,
	// as when a network delivers a request late. DelayFor bounds the hold
	// if no retry comes; it must exceed the client's attempt timeout.
	Delay    float64
	DelayFor time.Duration
}

// faultCounts tallies what the proxy did.
type faultCounts struct {
	forwarded, resets, drops, delays atomic.Int64
	// late counts delayed requests that reached the server after their
	// client had given up on them, beside a retry.
	late atomic.Int64
	// conflicts counts the server's 409s, and pairConflicts those answered
	// to a delayed request or to the retry that went beside it: proof that
	// the two were in flight at the server together.
	conflicts, pairConflicts atomic.Int64
	// storeDown counts the server's 503 store-unavailable answers: the
	// idempotency store could not be reached (a Redis that is down).
	storeDown atomic.Int64
}

// proxy forwards requests to backend, injecting faults at random: the
// clients' requests, and the provider's webhooks, which it tells apart by
// their webhook-id and counts apart.
type proxy struct {
	backend string
	faults  Faults
	client  *http.Client
	counts  faultCounts
	hooks   faultCounts // the webhooks'
	// answers holds every successful answer to a charge or refund against
	// the first of its key, and hookAnswers every 200 to a webhook against
	// the first of its event.
	answers, hookAnswers answers

	mu      sync.Mutex
	held    map[string]chan struct{} // delayed requests by idempotency key: closed when a retry comes
	drained bool
	holding sync.WaitGroup // delayed requests not yet answered
}

func newProxy(backend string, f Faults) *proxy {
	return &proxy{
		backend: backend,
		faults:  f,
		client:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: time.Minute},
		held:    map[string]chan struct{}{},
	}
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, counts := r.Header.Get("Idempotency-Key"), &p.counts
	seen := seenAs{&p.answers, answerKey(r.URL.Path, key)}
	if id := r.Header.Get(webhook.HeaderID); id != "" {
		// A webhook: its id is its key, and its retry the provider's
		// redelivery.
		key, counts = "webhook "+id, &p.hooks
		seen = seenAs{&p.hookAnswers, key}
	}
	if key == "" || r.Method != http.MethodPost {
		seen = seenAs{}
	}
	// A retry has come: the request held for its key goes now, beside it.
	beside := p.release(key)
	roll := rand.Float64()
	switch {
	case roll < p.faults.Reset:
		counts.resets.Add(1)
		reset(w)
		return
	case roll < p.faults.Reset+p.faults.Delay:
		counts.delays.Add(1)
		p.delay(w, r, key, counts, seen)
		return
	}
	drop := roll < p.faults.Reset+p.faults.Delay+p.faults.Drop

	body, err := io.ReadAll(r.Body)
	if err != nil {
		reset(w)
		return
	}
	resp, respBody, err := p.forward(r.Context(), r, body, beside, counts, seen)
	if resp == nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	if err != nil || drop {
		// The server has done its work; the client never hears of it.
		counts.drops.Add(1)
		reset(w)
		return
	}
	respond(w, resp, respBody)
}

// delay holds r until a retry with the same key reaches the proxy (or
// DelayFor has passed), then forwards it whether or not its client still
// waits, and answers the client if it does.
func (p *proxy) delay(w http.ResponseWriter, r *http.Request, key string, counts *faultCounts, seen seenAs) {
	// Read now: the client may be gone by the time the request goes on.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		reset(w)
		return
	}
	released, held := p.hold(key)
	if !held {
		released = nil // draining, or no key to wait for a retry of: only the timer
	} else {
		defer p.holding.Done()
	}
	t := time.NewTimer(p.faults.DelayFor)
	beside := false
	select {
	case <-released:
		beside = true
	case <-t.C:
		p.unhold(key, released)
	}
	t.Stop()
	gone := r.Context().Err() != nil
	resp, respBody, err := p.forward(context.WithoutCancel(r.Context()), r, body, beside, counts, seen)
	if resp == nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	switch {
	case gone:
		counts.late.Add(1)
	case err != nil:
		reset(w)
	default:
		respond(w, resp, respBody)
	}
}

// hold registers a delayed request under key; the returned channel is
// closed when a retry comes. It reports false when nothing can be held.
func (p *proxy) hold(key string) (chan struct{}, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drained || key == "" {
		return nil, false
	}
	if prev := p.held[key]; prev != nil {
		close(prev) // a third copy: let the earlier one go
	}
	c := make(chan struct{})
	p.held[key] = c
	p.holding.Add(1)
	return c, true
}

// unhold forgets a held request whose time ran out.
func (p *proxy) unhold(key string, c chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held[key] == c {
		delete(p.held, key)
	}
}

// release lets the request held for key go, and reports whether there was
// one.
func (p *proxy) release(key string) bool {
	if key == "" {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.held[key]
	if c == nil {
		return false
	}
	delete(p.held, key)
	close(c)
	return true
}

// drain lets every held request go and waits until the server has
// answered them all, so that nothing the proxy holds reaches the server
// after the storm has counted the charges.
func (p *proxy) drain() {
	p.mu.Lock()
	p.drained = true
	for key, c := range p.held {
		delete(p.held, key)
		close(c)
	}
	p.mu.Unlock()
	p.holding.Wait()
}

// resume lets the proxy hold delayed requests again after a drain.
func (p *proxy) resume() {
	p.mu.Lock()
	p.drained = false
	p.mu.Unlock()
}

// seenAs is where the proxy holds an answer against its key's first:
// nil for a request with no key.
type seenAs struct {
	answers *answers
	key     string
}

// forward sends r, with body, to the backend, and counts it in counts.
// beside says r went to the server together with another copy of itself.
// The response is nil if the server could not be reached; with an error,
// its body could not be read. An answer read whole is shown to seen,
// whether or not the client will get it.
func (p *proxy) forward(ctx context.Context, r *http.Request, body []byte, beside bool, counts *faultCounts, seen seenAs) (*http.Response, []byte, error) {
	out, err := http.NewRequestWithContext(ctx, r.Method, p.backend+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	out.Header = r.Header.Clone()
	resp, err := p.client.Do(out)
	if err != nil {
		return nil, nil, err
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	counts.forwarded.Add(1)
	if err == nil && seen.answers != nil {
		seen.answers.see(seen.key, resp.StatusCode, resp.Header.Get("Location"), respBody)
	}
	switch {
	case resp.StatusCode == http.StatusConflict:
		counts.conflicts.Add(1)
		if beside {
			counts.pairConflicts.Add(1)
		}
	case resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(respBody, []byte("/"+exchange.ProblemStoreUnavailable)):
		counts.storeDown.Add(1)
	}
	return resp, respBody, err
}

func respond(w http.ResponseWriter, resp *http.Response, body []byte) {
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(body)
}

// reset closes the client's connection abruptly (TCP RST).
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		tcp.SetLinger(0)
	}
	conn.Close()
}
