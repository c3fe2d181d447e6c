package idem

import "time"

// Clock is the Engine's source of time: record times, lease reckoning,
// renewal schedule, handler timeouts and store-call deadlines all read it.
// The default is the system clock (with its monotonic reading, so a step of
// the wall clock neither shortens nor stretches a lease within a process).
// Tests and the deterministic simulation (package idemsim) give their own,
// so that one seed always yields the same schedule and a simulated day
// takes milliseconds.
//
// A Clock that is also a Spawner starts the goroutines the Engine runs
// beside requests.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f, in a goroutine of its own, once d has passed,
	// unless the returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
}

// Spawner is an optional capability of a Clock: it starts the goroutines
// the Engine runs beside requests (its renewal calls to the store). The
// Engine then starts each of them with Go instead of the go statement, so
// that a simulation decides when each one runs, as it decides when timers
// fire. idemtest.Clock is one.
type Spawner interface {
	// Go runs f exactly once, concurrently with the caller; it must not
	// wait for f.
	Go(f func())
}

// Timer is a pending call of Clock.AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not started yet, and reports
	// whether it did.
	Stop() bool
}

// systemClock is the Clock of the operating system: time.Now and
// time.AfterFunc.
type systemClock struct{}

// Now returns time.Now().
func (systemClock) Now() time.Time { return time.Now() }

// AfterFunc returns time.AfterFunc(d, f).
func (systemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
