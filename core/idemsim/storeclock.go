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
// that every other is still there as it was (model.storePurged).
type storeClock struct {
	w       *world
	pending []*storeTimer
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
	t := &storeTimer{d: d, f: f}
	if c.w == nil {
		c.pending = append(c.pending, t)
		return t
	}
	c.start(t)
	return t
}

func (c *storeClock) start(t *storeTimer) {
	t.t = c.w.s.afterDaemon(t.d, func() {
		t.f()
		c.w.m.storePurged()
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
	d       time.Duration
	f       func()
	t       idem.Timer
	stopped bool
}

// Stop implements idem.Timer.
func (t *storeTimer) Stop() bool {
	if t.t != nil {
		return t.t.Stop()
	}
	was := !t.stopped
	t.stopped = true
	return was
}
