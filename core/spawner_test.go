package idem_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
)

// manualClock is a Clock whose timers fire, and whose goroutines start,
// only when the test says so: the seams the deterministic simulation
// (package idemsim) drives the Engine through.
type manualClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*manualTimer
	spawned []func()
}

type manualTimer struct {
	c       *manualClock
	at      time.Time
	f       func()
	stopped bool
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) idem.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	i := slices.Index(t.c.timers, t)
	if i < 0 {
		return false
	}
	t.c.timers = slices.Delete(t.c.timers, i, i+1)
	return true
}

// Go implements idem.Spawner: the goroutine waits for runSpawned.
func (c *manualClock) Go(f func()) {
	c.mu.Lock()
	c.spawned = append(c.spawned, f)
	c.mu.Unlock()
}

// advance moves the clock to now+d, calling each timer that comes due
// in the test's goroutine, in order.
func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var next *manualTimer
		for _, t := range c.timers {
			if !t.at.After(end) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			c.now = end
			c.mu.Unlock()
			return
		}
		c.timers = slices.DeleteFunc(c.timers, func(t *manualTimer) bool { return t == next })
		c.now = next.at
		c.mu.Unlock()
		next.f()
	}
}

func (c *manualClock) runSpawned() int {
	c.mu.Lock()
	fs := c.spawned
	c.spawned = nil
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
	return len(fs)
}

type countRenewals struct {
	idem.Store
	renewals atomic.Int64
}

func (s *countRenewals) Renew(ctx context.Context, id idem.ID, token string, until time.Time) error {
	s.renewals.Add(1)
	return s.Store.Renew(ctx, id, token, until)
}

// A Clock that is also an idem.Spawner starts the Engine's renewal calls:
// none runs on a goroutine of its own, so a simulation decides when each
// one happens.
func TestSpawnerStartsRenewals(t *testing.T) {
	mem := memstore.New(memstore.WithPurgeInterval(0))
	defer mem.Close()
	store := &countRenewals{Store: mem}
	clock := &manualClock{now: time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC)}
	e := idem.New(idem.Config{
		Store: store, Clock: clock, Lease: 30 * time.Second, RenewEvery: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	d := e.Begin(context.Background(), &idem.Request{Method: "POST", Path: "/p", KeyLines: []string{`"k"`}, Body: []byte{}})
	if d.Action != idem.Run {
		t.Fatalf("Begin: action %v, want Run", d.Action)
	}
	clock.advance(10 * time.Second) // the first renewal is due
	if n := store.renewals.Load(); n != 0 {
		t.Fatalf("%d renewals reached the store on a goroutine the clock did not start", n)
	}
	if n := clock.runSpawned(); n != 1 {
		t.Fatalf("the clock was asked to start %d goroutines, want 1 renewal", n)
	}
	if n := store.renewals.Load(); n != 1 {
		t.Fatalf("%d renewals after the spawned goroutine ran, want 1", n)
	}
	if err := d.Lock.Finish(context.Background(), 201, nil); err != nil {
		t.Fatal(err)
	}
}
