package idemtest

import (
	"slices"
	"sync"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// Clock is a manual idem.Clock for tests of leases, renewals and expiry:
// give it to idem.Config.Clock and move it with Advance instead of
// sleeping. Its timers fire, in order, only as Advance reaches them, in
// the goroutine that calls Advance. It is also an idem.Clock: the
// goroutines an Engine starts (its renewal calls) run in Advance too, one
// after another, once the timer that started them has returned. So an
// Advance returns only when every renewal it made due has reached the store
// and its outcome is recorded, and a test sees the same schedule every time.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*clockTimer
	spawned []func()
}

// NewClock returns a Clock showing start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

var (
	_ idem.Clock                = (*Clock)(nil)
	_ interface{ Go(f func()) } = (*Clock)(nil) // the Engine starts its renewals through it
)

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements idem.Clock: f is called by the Advance that reaches
// d from now.
func (c *Clock) AfterFunc(d time.Duration, f func()) idem.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &clockTimer{c: c, at: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Go implements idem.Clock: f runs in the Advance under way once the
// timer that called Go has returned, or in the next Advance.
func (c *Clock) Go(f func()) {
	c.mu.Lock()
	c.spawned = append(c.spawned, f)
	c.mu.Unlock()
}

// Advance moves the clock forward by d, calling each timer that comes due,
// in order of their times, with the clock showing that time, and running
// what they spawned after each.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.runSpawned()
		c.mu.Lock()
		var next *clockTimer
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
		c.timers = slices.DeleteFunc(c.timers, func(t *clockTimer) bool { return t == next })
		if next.at.After(c.now) {
			c.now = next.at
		}
		c.mu.Unlock()
		next.f()
	}
}

// runSpawned runs what was spawned, and what that spawns, until none is left.
func (c *Clock) runSpawned() {
	for {
		c.mu.Lock()
		fs := c.spawned
		c.spawned = nil
		c.mu.Unlock()
		if len(fs) == 0 {
			return
		}
		for _, f := range fs {
			f()
		}
	}
}

type clockTimer struct {
	c  *Clock
	at time.Time
	f  func()
}

// Stop implements idem.Timer.
func (t *clockTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	n := len(t.c.timers)
	t.c.timers = slices.DeleteFunc(t.c.timers, func(x *clockTimer) bool { return x == t })
	return len(t.c.timers) < n
}

// ClockOf returns an idem.Clock that reads the time from now and keeps the
// system's timers: for a test that shifts or freezes the time records get
// while leases and deadlines run in real time.
func ClockOf(now func() time.Time) idem.Clock { return nowClock(now) }

type nowClock func() time.Time

func (c nowClock) Now() time.Time                               { return c() }
func (nowClock) AfterFunc(d time.Duration, f func()) idem.Timer { return time.AfterFunc(d, f) }
