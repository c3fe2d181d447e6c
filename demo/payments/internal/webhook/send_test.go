package webhook

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// receiver answers each webhook-id by its script, one status per attempt
// (the last one repeated; 0 hangs past the sender's attempt timeout
// before answering 200), and counts the attempts, checking every
// signature.
type receiver struct {
	t       *testing.T
	secret  Secret
	release chan struct{}

	mu       sync.Mutex
	script   map[string][]int
	attempts map[string]int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := rc.secret.Verify(r.Header.Get, body, time.Now()); err != nil {
		rc.t.Errorf("a delivery does not verify: %v", err)
	}
	id := r.Header.Get(HeaderID)
	rc.mu.Lock()
	n := rc.attempts[id]
	rc.attempts[id]++
	script := rc.script[id]
	rc.mu.Unlock()
	status := script[min(n, len(script)-1)]
	if status == 0 {
		select {
		case <-r.Context().Done():
		case <-rc.release:
		}
		status = 200
	}
	w.WriteHeader(status)
}

func (rc *receiver) count(id string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.attempts[id]
}

// TestSenderDeliversAtLeastOnce: a delivery is retried after a 5xx, a
// 409, a 429 and a timeout, each attempt signed anew, until a 2xx; a 4xx
// that says the request itself is wrong ends it; one that keeps failing
// stops after MaxAttempts; and with DuplicateRate 1 every message goes
// out twice.
func TestSenderDeliversAtLeastOnce(t *testing.T) {
	rc := &receiver{t: t, secret: NewSecret(), release: make(chan struct{}), attempts: map[string]int{}, script: map[string][]int{
		"ok":        {200},
		"after-503": {503, 503, 200},
		"after-409": {409, 200},
		"after-429": {429, 204},
		"timeout":   {0, 200},
		"refused":   {422, 200},
		"failing":   {500},
	}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	defer close(rc.release)
	var delivered atomic.Int64
	s := &Sender{URL: srv.URL, Secret: rc.secret, MaxAttempts: 4, AttemptTimeout: 300 * time.Millisecond,
		Delivered: func(Message) { delivered.Add(1) }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.Start(ctx)
	var msgs []Message
	for id := range rc.script {
		msgs = append(msgs, Message{ID: id, Body: []byte(`{"type":"charge.settled"}`)})
	}
	s.Send(ctx, msgs)
	s.Idle()
	total := 0
	for id, want := range map[string]int{"ok": 1, "after-503": 3, "after-409": 2, "after-429": 2, "timeout": 2, "refused": 1, "failing": 4} {
		if got := rc.count(id); got != want {
			t.Errorf("%s: %d attempts, want %d", id, got, want)
		}
		total += want
	}
	if delivered.Load() != int64(total) {
		t.Errorf("Delivered was called %d times for %d requests", delivered.Load(), total)
	}

	dup := &receiver{t: t, secret: rc.secret, attempts: map[string]int{}, script: map[string][]int{"a": {200}, "b": {200}}}
	srv2 := httptest.NewServer(dup)
	defer srv2.Close()
	s2 := &Sender{URL: srv2.URL, Secret: rc.secret, DuplicateRate: 1}
	s2.Start(ctx)
	s2.Send(ctx, []Message{{ID: "a", Body: []byte("{}")}, {ID: "b", Body: []byte("{}")}})
	s2.Idle()
	if dup.count("a") != 2 || dup.count("b") != 2 {
		t.Fatalf("with DuplicateRate 1: %d and %d deliveries, want 2 each", dup.count("a"), dup.count("b"))
	}
}

// TestSenderLeavesAMessageToItsDelivery: a message sent again while a
// delivery of it is still under way is left to that delivery; once it is
// over, the message can be sent again.
func TestSenderLeavesAMessageToItsDelivery(t *testing.T) {
	rc := &receiver{t: t, secret: NewSecret(), release: make(chan struct{}), attempts: map[string]int{},
		script: map[string][]int{"slow": {0, 200}}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	s := &Sender{URL: srv.URL, Secret: rc.secret, AttemptTimeout: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.Start(ctx)
	m := []Message{{ID: "slow", Body: []byte("{}")}}
	s.Send(ctx, m)
	for rc.count("slow") == 0 {
		time.Sleep(time.Millisecond) // the first delivery reaches the receiver, and hangs there
	}
	s.Send(ctx, m)
	close(rc.release)
	s.Idle()
	if n := rc.count("slow"); n != 1 {
		t.Fatalf("%d deliveries of a message sent again while its first was under way, want 1", n)
	}
	s.Send(ctx, m)
	s.Idle()
	if n := rc.count("slow"); n != 2 {
		t.Fatalf("%d deliveries once the first was over and the message sent again, want 2", n)
	}
}
