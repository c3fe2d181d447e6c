package idemclient_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// fakeClock is the Transport's clock and sleep in tests: Sleep records the
// wait and moves the clock instead of waiting.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Sleep records every wait asked for. A wait that would outlast ctx's
// deadline (measured on the real clock, as the context does) fails with
// context.DeadlineExceeded, as a real timer cut short by the deadline would.
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = append(c.slept, d)
	if dl, ok := ctx.Deadline(); ok && d >= time.Until(dl) {
		return context.DeadlineExceeded
	}
	c.now = c.now.Add(d)
	return nil
}

func (c *fakeClock) Slept() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.slept...)
}

// step is one scripted answer of a scriptedRT: a response, or an error.
type step struct {
	status     int
	retryAfter string
	replayed   bool
	err        error
}

// sent is what a scriptedRT saw of one attempt.
type sent struct {
	method string
	key    []string
	body   string
}

// scriptedRT is a fake base RoundTripper answering with its steps in order,
// repeating the last one when they run out. It reads and closes request
// bodies as a real transport does, and tracks the bodies it hands out.
type scriptedRT struct {
	mu     sync.Mutex
	steps  []step
	sent   []sent
	bodies []*trackedBody
	// before, if set, runs at the start of each attempt (1-based).
	before func(ctx context.Context, attempt int) error
}

func (s *scriptedRT) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body.Close()
	}
	s.mu.Lock()
	s.sent = append(s.sent, sent{method: r.Method, key: r.Header.Values("Idempotency-Key"), body: string(body)})
	n := len(s.sent)
	st := s.steps[min(n, len(s.steps))-1]
	s.mu.Unlock()
	if s.before != nil {
		if err := s.before(r.Context(), n); err != nil {
			return nil, err
		}
	}
	if st.err != nil {
		return nil, st.err
	}
	h := http.Header{}
	if st.retryAfter != "" {
		h.Set("Retry-After", st.retryAfter)
	}
	if st.replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	b := &trackedBody{r: strings.NewReader(strings.Repeat("x", 100) + http.StatusText(st.status))}
	s.mu.Lock()
	s.bodies = append(s.bodies, b)
	s.mu.Unlock()
	return &http.Response{StatusCode: st.status, Header: h, Body: b, Request: r}, nil
}

func (s *scriptedRT) Sent() []sent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sent(nil), s.sent...)
}

// trackedBody records whether it was read to the end and closed.
type trackedBody struct {
	mu     sync.Mutex
	r      *strings.Reader
	eof    bool
	closed bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *trackedBody) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	return nil
}

func (b *trackedBody) state() (eof, closed bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof, b.closed
}

// closeTracker is a request body that is not rewindable and records Close.
type closeTracker struct {
	io.Reader
	mu     sync.Mutex
	closed bool
}

func (c *closeTracker) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

func (c *closeTracker) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
