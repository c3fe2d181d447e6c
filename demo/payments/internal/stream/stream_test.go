package stream

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/internal/testservers"
	"github.com/redis/go-redis/v9"
)

// testStream returns a Stream on the test Redis under a key of its own,
// deleted when the test ends.
func testStream(t *testing.T, consumer string) *Stream {
	t.Helper()
	addr := testservers.Require(t, testservers.RedisAddr)
	client := redis.NewClient(&redis.Options{Addr: addr})
	key := "test:events:" + rand.Text()
	t.Cleanup(func() {
		client.Del(context.Background(), key)
		client.Close()
	})
	return &Stream{Client: client, Key: key, Group: "g", Consumer: consumer, ClaimAfter: 200 * time.Millisecond, Batch: 10}
}

// with is another consumer of s's stream and group.
func (s *Stream) with(consumer string) *Stream {
	return &Stream{Client: s.Client, Key: s.Key, Group: s.Group, Consumer: consumer, ClaimAfter: s.ClaimAfter, Batch: s.Batch}
}

func publish(t *testing.T, s *Stream, n int, prefix string) []string {
	t.Helper()
	var events []Event
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s%d", prefix, i)
		events = append(events, Event{ID: id, Body: []byte(`{"n":` + fmt.Sprint(i) + `}`)})
		ids = append(ids, id)
	}
	if err := s.Publish(t.Context(), events); err != nil {
		t.Fatal(err)
	}
	return ids
}

// applied counts the applications of each event id.
type applied struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *applied) apply(ack bool) Apply {
	return func(_ context.Context, e Event) bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.n == nil {
			a.n = map[string]int{}
		}
		a.n[e.ID]++
		return ack
	}
}

func (a *applied) count(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[id]
}

// eventually polls cond until it holds, failing the test after a minute.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute: %s", what)
		}
	}
}

func pending(t *testing.T, s *Stream) int64 {
	t.Helper()
	p, err := s.Client.XPending(t.Context(), s.Key, s.Group).Result()
	if err != nil {
		t.Fatal(err)
	}
	return p.Count
}

// run consumes s until the test ends.
func run(t *testing.T, s *Stream, apply Apply) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Consume(ctx, apply); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return func() { cancel(); <-done }
}

// TestConsumeAppliesAndAcknowledges: every entry is applied and
// acknowledged, entries published before the group existed included.
func TestConsumeAppliesAndAcknowledges(t *testing.T) {
	s := testStream(t, "c1")
	ids := publish(t, s, 35, "early-")
	var a applied
	run(t, s, a.apply(true))
	ids = append(ids, publish(t, s, 35, "late-")...)
	eventually(t, "every entry applied and acknowledged", func() bool { return s.Acked.Load() == int64(len(ids)) })
	for _, id := range ids {
		if n := a.count(id); n != 1 {
			t.Fatalf("%s applied %d times by the one consumer", id, n)
		}
	}
	if p := pending(t, s); p != 0 {
		t.Fatalf("%d entries still pending", p)
	}
}

// TestPendingEntriesAreClaimed: entries a consumer read and never
// acknowledged (it could not apply them, or died) are claimed after
// ClaimAfter by another consumer, applied and acknowledged.
func TestPendingEntriesAreClaimed(t *testing.T) {
	stuck := testStream(t, "stuck")
	ids := publish(t, stuck, 25, "e-")
	var never applied
	stop := run(t, stuck, never.apply(false))
	eventually(t, "the stuck consumer read every entry", func() bool { return stuck.Read.Load() >= int64(len(ids)) })
	stop()
	if p := pending(t, stuck); p != int64(len(ids)) {
		t.Fatalf("%d entries pending with the stuck consumer, want %d", p, len(ids))
	}

	next := stuck.with("next")
	var a applied
	run(t, next, a.apply(true))
	eventually(t, "the entries claimed and acknowledged", func() bool { return pending(t, next) == 0 })
	if next.Claimed.Load() < int64(len(ids)) {
		t.Fatalf("%d entries claimed, want %d", next.Claimed.Load(), len(ids))
	}
	for _, id := range ids {
		if a.count(id) != 1 {
			t.Fatalf("%s applied %d times by the next consumer", id, a.count(id))
		}
	}
}

// TestConsumeSurvivesALostStream: a Redis that lost the stream and its
// group (emptied, or restarted without its files) is no end: the consumer
// makes the group again and goes on with the entries published since.
func TestConsumeSurvivesALostStream(t *testing.T) {
	s := testStream(t, "c1")
	var a applied
	run(t, s, a.apply(true))
	first := publish(t, s, 5, "before-")
	eventually(t, "the first entries applied", func() bool { return s.Acked.Load() == int64(len(first)) })
	if err := s.Client.Del(t.Context(), s.Key).Err(); err != nil {
		t.Fatal(err)
	}
	// The consumer meets NOGROUP at its next read, and makes the group on
	// a new stream, from its beginning.
	then := publish(t, s, 5, "after-")
	eventually(t, "the entries published after the loss applied", func() bool {
		for _, id := range then {
			if a.count(id) == 0 {
				return false
			}
		}
		return true
	})
}

// TestDrained: a group is drained once it has read every entry and
// acknowledged them all; not while an entry is unread or pending, nor
// before the group exists.
func TestDrained(t *testing.T) {
	s := testStream(t, "c1")
	if drained, _, err := s.Drained(t.Context()); drained || err == nil {
		t.Fatalf("no stream yet: drained %v, %v; want an error", drained, err)
	}
	publish(t, s, 3, "e")
	if drained, _, _ := s.Drained(t.Context()); drained {
		t.Fatal("no group yet, yet drained")
	}
	if err := s.Client.XGroupCreate(t.Context(), s.Key, s.Group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	if drained, _, _ := s.Drained(t.Context()); drained {
		t.Fatal("nothing read yet, yet drained")
	}
	msgs, err := s.Client.XReadGroup(t.Context(), &redis.XReadGroupArgs{Group: s.Group, Consumer: s.Consumer, Streams: []string{s.Key, ">"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if drained, pending, _ := s.Drained(t.Context()); drained || pending != 3 {
		t.Fatalf("all read, none acknowledged: drained %v with %d pending, want 3 pending", drained, pending)
	}
	for _, m := range msgs[0].Messages {
		s.Client.XAck(t.Context(), s.Key, s.Group, m.ID)
	}
	if drained, pending, err := s.Drained(t.Context()); !drained || pending != 0 || err != nil {
		t.Fatalf("all read and acknowledged: drained %v, %d pending, %v", drained, pending, err)
	}
}
