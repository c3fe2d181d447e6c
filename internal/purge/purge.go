// Package purge holds what the background purgers of idemkit's stores
// share: their settings, their clock reading and their schedule. A store
// that runs a purger keeps an Options among its own, sets it from its
// WithPurgeInterval, WithPurgeBatch and WithClock options, and runs its
// batches with Run.
package purge

import (
	"context"
	"sync"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// Options are a background purger's settings.
type Options struct {
	// Interval is how often the purger runs; 0 runs none (purging is left
	// to explicit Purge calls).
	Interval time.Duration
	// Batch is the most records one batch deletes.
	Batch int
	// Clock says what has expired (nil: the system's). Give it the
	// Engine's clock.
	Clock idem.Clock
}

// Defaults returns Options with this interval and batch, on the system clock.
func Defaults(interval time.Duration, batch int) Options {
	return Options{Interval: interval, Batch: batch}
}

// SetInterval sets Interval; a negative d is 0.
func (o *Options) SetInterval(d time.Duration) { o.Interval = max(d, 0) }

// SetBatch sets Batch, unless n is not positive.
func (o *Options) SetBatch(n int) {
	if n > 0 {
		o.Batch = n
	}
}

// SetClock sets Clock, unless c is nil.
func (o *Options) SetClock(c idem.Clock) {
	if c != nil {
		o.Clock = c
	}
}

// Now is the purger's reading of its clock: by whichever of its wall and
// monotonic readings is the earlier, measured from base (a time with a
// monotonic reading, such as the store's creation). Records are reckoned
// by the Engine's times, on the monotonic clock when they carry a reading
// of it and on the wall clock when not, and the purger's clock need not be
// alike. After a step of the wall clock the two readings disagree, and by
// the later one the purger would delete records early: a completed record
// before its retry came, an in-flight one under its running handler. By the
// earlier one it may delete late, which only holds them a while longer.
func (o *Options) Now(base time.Time) time.Time {
	now := time.Now()
	if o.Clock != nil {
		now = o.Clock.Now()
	}
	if wall := now.Round(0); wall.Sub(base) < now.Sub(base) {
		return wall
	}
	return now
}

// Run calls pass every o.Interval until ctx ends, and returns then. pass
// runs the batches of one purge, and should return early once ctx ends.
// It is Start, waiting for ctx to end.
func (o *Options) Run(ctx context.Context, pass func(context.Context)) {
	stop := o.Start(ctx, pass)
	<-ctx.Done()
	stop()
}

// Start calls pass every o.Interval until ctx ends or the function it
// returns is called; that function cancels the context pass gets, waits
// for a pass under way to return, and may be called more than once.
// With no Clock the passes run on a goroutine of their own, on a ticker of
// the system. With a Clock they run when its timers fire (Clock.AfterFunc,
// called before Start returns): a test that moves its clock by hand
// (idemtest.Clock), or a simulation, then decides when the purger runs,
// as it decides when the Engine's timers fire.
func (o *Options) Start(ctx context.Context, pass func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	if o.Clock == nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			t := time.NewTicker(o.Interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					pass(ctx)
				}
			}
		}()
		return func() {
			cancel()
			<-done
		}
	}
	var (
		mu      sync.Mutex
		timer   idem.Timer
		stopped bool
		running sync.WaitGroup
		tick    func()
	)
	tick = func() {
		mu.Lock()
		if stopped || ctx.Err() != nil {
			mu.Unlock()
			return
		}
		running.Add(1)
		mu.Unlock()
		defer running.Done()
		pass(ctx)
		mu.Lock()
		if !stopped && ctx.Err() == nil {
			timer = o.Clock.AfterFunc(o.Interval, tick)
		}
		mu.Unlock()
	}
	mu.Lock()
	timer = o.Clock.AfterFunc(o.Interval, tick)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		timer.Stop()
		mu.Unlock()
		cancel()
		running.Wait()
	}
}
