package idemsim

import (
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// storeClock is the idem.Clock a target's store gets for its own
// background work (Target.OpenWithClock): the world's virtual time, with
// no skew, and timers that run in the scheduler itself (sched.afterDaemon).
// The store is opened before its world exists: the timers it sets until
// then wait for bind, and its clock reads the epoch.
//
// Its timers are the store's purger's passes: once the work of each is
// done, the model checks that every record expired by then is gone, and
// that every other is still there as it was (model.storePurged), and that
// the purger has set the timer of a next pass: a purger that stops after
// a pass leaves every record that expires later in the store for ever.
type storeClock struct {
	w       *world
	pending []*storeTimer
	armed   int // timers set, neither fired nor stopped
}

var _ idem.Clock = (*storeClock)(nil)

// Now implements idem.Clock.
func (c *storeClock) Now() time.Time {
	if c.w == nil {
		return epoch
	}
	return c.w.s.now
}

// AfterFunc implements idem.Clock.
func (c *storeClock) AfterFunc(d time.Duration, f func()) idem.Timer {
	t := &storeTimer{c: c, d: d, f: f, armed: true}
	c.armed++
	if c.w == nil {
		c.pending = append(c.pending, t)
		return t
	}
	c.start(t)
	return t
}

func (c *storeClock) start(t *storeTimer) {
	t.t = c.w.s.afterDaemon(t.d, func() {
		t.disarm()
		t.f()
		c.w.m.storePurged()
		if c.armed == 0 {
			c.w.m.contractf("the store's purger set no timer for a next pass after its pass at %s: what expires from now stays in the store", c.w.at(c.w.s.now))
		}
	})
}

// bind starts the clock in w, and the timers set before.
func (c *storeClock) bind(w *world) {
	c.w = w
	for _, t := range c.pending {
		if !t.stopped {
			c.start(t)
		}
	}
	c.pending = nil
}

// storeTimer is a timer of the store's clock, set before or after bind.
type storeTimer struct {
	c       *storeClock
	d       time.Duration
	f       func()
	t       idem.Timer
	stopped bool
	armed   bool // counted in c.armed
}

// disarm takes t out of its clock's count of armed timers.
func (t *storeTimer) disarm() {
	if t.armed {
		t.armed = false
		t.c.armed--
	}
}

// Stop implements idem.Timer.
func (t *storeTimer) Stop() bool {
	if t.t != nil {
		if t.t.Stop() {
			t.disarm()
			return true
		}
		return false
	}
	was := !t.stopped
	t.stopped = true
	t.disarm()
	return was
}
