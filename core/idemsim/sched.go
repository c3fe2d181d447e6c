package idemsim

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// sched runs the simulated goroutines (procs) one at a time, in an order
// drawn from the seed, on a virtual clock. A proc runs until it blocks on
// the scheduler (a sleep, a wait for a context or a condition) or ends;
// only then does the scheduler pick the next one among those ready. Time
// moves only when no proc is ready: to the earliest sleep's end or timer,
// whose callback then starts as a proc of its own. So nothing that the
// simulated code does depends on the host's timing, and one seed always
// yields the same schedule.
//
// Everything the simulated code touches (the Engine's clock, its renewal
// goroutines, the store's latency) goes through the scheduler, and only the
// running proc touches the scheduler's state; the handoff through channels
// orders every access.
type sched struct {
	rng    *rand.Rand
	now    time.Time
	procs  []*proc // live, in creation order
	timers timerHeap
	seq    uint64
	nextID int
	cur    *proc
	back   chan struct{}
	steps  int

	aborting bool     // the run is over: every proc is to exit at its next wait
	panics   []string // panics of procs, with their stacks
	onStep   func()   // called after every step
	stopped  func() bool
}

// proc is one simulated goroutine.
type proc struct {
	id    int
	name  string
	owner *node // the engine process it belongs to; nil for clients and the world
	tag   any   // the attempt it serves (a request or a job's delivery), for the store wrapper
	wake  chan struct{}

	blocked bool
	until   time.Time       // wakes when now reaches it (if set)
	ctx     context.Context // wakes when it is done (if set)
	cond    func() bool     // wakes when it holds (if set)
	exited  bool
}

func newSched(seed uint64, start time.Time) *sched {
	return &sched{
		rng:  rand.New(rand.NewPCG(seed, 0x5eed)),
		now:  start,
		back: make(chan struct{}),
	}
}

// spawn starts f as a proc belonging to owner (nil: to no engine process).
// The proc is ready at once but runs only when the scheduler picks it.
func (s *sched) spawn(owner *node, name string, f func()) *proc {
	p := &proc{id: s.nextID, name: name, owner: owner, wake: make(chan struct{})}
	s.nextID++
	s.procs = append(s.procs, p)
	go p.run(s, f)
	return p
}

func (p *proc) run(s *sched, f func()) {
	<-p.wake
	defer func() {
		if r := recover(); r != nil {
			s.panics = append(s.panics, fmt.Sprintf("%s: panic: %v\n%s", p.name, r, debug.Stack()))
		}
		p.exited = true
		s.back <- struct{}{}
	}()
	if s.aborting || p.owner.isDead() {
		return
	}
	f()
}

// wait blocks the running proc until now reaches until (if not zero), ctx
// is done (if not nil) or cond holds (if not nil); with none of them it
// only yields. A proc whose engine process has crashed never returns from
// wait: it exits, running its deferred calls, as a killed process's
// threads would simply stop.
func (s *sched) wait(until time.Time, ctx context.Context, cond func() bool) {
	p := s.cur
	p.blocked, p.until, p.ctx, p.cond = true, until, ctx, cond
	s.back <- struct{}{}
	<-p.wake
	p.blocked, p.until, p.ctx, p.cond = false, time.Time{}, nil, nil
	if s.aborting || p.owner.isDead() {
		runtime.Goexit()
	}
}

// yield lets the scheduler run any other ready proc first.
func (s *sched) yield() { s.wait(time.Time{}, nil, nil) }

// sleep blocks the running proc for d of virtual time (a yield if d <= 0).
func (s *sched) sleep(d time.Duration) {
	if d <= 0 {
		s.yield()
		return
	}
	s.wait(s.now.Add(d), nil, nil)
}

// sleepCtx sleeps for d unless ctx ends first, and reports whether it
// slept the whole time with ctx still live.
func (s *sched) sleepCtx(ctx context.Context, d time.Duration) bool {
	s.wait(s.now.Add(max(d, 0)), ctx, nil)
	return ctx.Err() == nil
}

func (s *sched) ready(p *proc) bool {
	switch {
	case s.aborting || p.owner.isDead():
		return true
	case p.owner != nil && s.now.Before(p.owner.pausedUntil):
		return false // its process is frozen
	case !p.blocked:
		return true
	case p.cond != nil && p.cond():
		return true
	case p.ctx != nil && p.ctx.Err() != nil:
		return true
	case !p.until.IsZero() && !s.now.Before(p.until):
		return true
	}
	return p.cond == nil && p.ctx == nil && p.until.IsZero()
}

// resume runs p until it blocks or ends.
func (s *sched) resume(p *proc) {
	s.cur = p
	p.wake <- struct{}{}
	<-s.back
	s.cur = nil
	if p.exited {
		for i, q := range s.procs {
			if q == p {
				s.procs = append(s.procs[:i], s.procs[i+1:]...)
				break
			}
		}
	}
}

// run schedules procs until none is left and no timer is pending, or time
// would pass limit, or stopped reports true. It reports whether the world
// became idle (nothing left to run, ever).
func (s *sched) run(limit time.Time) (idle bool) {
	var ready []*proc
	for {
		if s.stopped != nil && s.stopped() {
			return false
		}
		ready = ready[:0]
		for _, p := range s.procs {
			if s.ready(p) {
				ready = append(ready, p)
			}
		}
		if len(ready) > 0 {
			s.resume(ready[s.rng.IntN(len(ready))])
			s.steps++
			if len(s.panics) > 0 {
				return false
			}
			if s.onStep != nil {
				s.onStep()
			}
			continue
		}
		next, ok := s.nextEvent()
		if !ok || len(s.procs) == 0 && s.onlyDaemons() {
			return len(s.procs) == 0
		}
		if next.After(limit) {
			return false
		}
		if !next.After(s.now) && len(s.timers) > 0 && !s.timers[0].when.After(s.now) {
			s.fireTimers() // set for now by a step that just ran (a daemon's, see afterDaemon)
			continue
		}
		if !next.After(s.now) {
			panic(fmt.Sprintf("idemsim: scheduler stuck at %s: nothing ready, next event at %s", s.now, next))
		}
		s.now = next
		s.fireTimers()
	}
}

// nextEvent returns the earliest time at which a timer fires or a sleep
// ends.
func (s *sched) nextEvent() (time.Time, bool) {
	var next time.Time
	ok := false
	if len(s.timers) > 0 {
		next, ok = s.timers[0].when, true
	}
	for _, p := range s.procs {
		if p.owner != nil && s.now.Before(p.owner.pausedUntil) {
			continue // it wakes no earlier than its process thaws, which the world's pauser waits for
		}
		if p.blocked && !p.until.IsZero() && (!ok || p.until.Before(next)) {
			next, ok = p.until, true
		}
	}
	return next, ok
}

// fireTimers starts the timers due now as procs, and runs the daemons'
// at once.
func (s *sched) fireTimers() {
	for len(s.timers) > 0 && !s.timers[0].when.After(s.now) {
		t := heap.Pop(&s.timers).(*timer)
		if t.daemon {
			t.f()
			continue
		}
		s.spawn(t.owner, t.owner.name()+" timer", t.f)
	}
}

// onlyDaemons reports whether every timer pending is a daemon's.
func (s *sched) onlyDaemons() bool {
	for _, t := range s.timers {
		if !t.daemon {
			return false
		}
	}
	return true
}

// abort ends the run: every proc left exits at its next wait (or before
// it starts), running its deferred calls, and every timer is dropped.
func (s *sched) abort() {
	s.aborting = true
	for _, t := range s.timers {
		t.index = -1
	}
	s.timers = nil
	for len(s.procs) > 0 {
		s.resume(s.procs[0])
	}
}

// kill drops every timer of a crashed engine process; its procs exit when
// next scheduled (they are ready at once).
func (s *sched) kill(n *node) {
	kept := s.timers[:0]
	for _, t := range s.timers {
		if t.owner == n {
			t.index = -1
			continue
		}
		kept = append(kept, t)
	}
	for i, t := range kept {
		t.index = i
	}
	s.timers = kept
	heap.Init(&s.timers)
}

// afterFunc is Clock.AfterFunc for procs of owner.
func (s *sched) afterFunc(owner *node, d time.Duration, f func()) idem.Timer {
	s.seq++
	t := &timer{s: s, when: s.now.Add(max(d, 0)), seq: s.seq, f: f, owner: owner}
	heap.Push(&s.timers, t)
	return t
}

// afterDaemon is Clock.AfterFunc for the store's own background work (see
// storeClock): f runs in the scheduler itself when time reaches it,
// between two steps, and must not wait on the scheduler; and such a timer
// pending does not keep the world from being idle. Running no proc, it
// changes nothing in the order in which the seed runs the others.
func (s *sched) afterDaemon(d time.Duration, f func()) idem.Timer {
	s.seq++
	t := &timer{s: s, when: s.now.Add(max(d, 0)), seq: s.seq, f: f, daemon: true}
	heap.Push(&s.timers, t)
	return t
}

type timer struct {
	s      *sched
	when   time.Time
	seq    uint64
	f      func()
	owner  *node
	daemon bool // see afterDaemon
	index  int  // in the heap; -1 once fired, stopped or dropped
}

// Stop implements idem.Timer.
func (t *timer) Stop() bool {
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.s.timers, t.index)
	return true
}

// timerHeap orders timers by time, then by creation, so that timers due at
// the same moment fire in a fixed order.
type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].when.Equal(h[j].when) {
		return h[i].when.Before(h[j].when)
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}

// clock is an engine process's idem.Clock: the scheduler's virtual time,
// timers that fire as procs of that process, and the idem.Clock Go method
// capability, so that the Engine's renewal goroutines are procs too.
type clock struct {
	s *sched
	n *node
}

var (
	_ idem.Clock = clock{}
)

// Now implements idem.Clock: virtual time, off by the process's skew.
func (c clock) Now() time.Time { return c.s.now.Add(c.n.skew) }

// AfterFunc implements idem.Clock.
func (c clock) AfterFunc(d time.Duration, f func()) idem.Timer { return c.s.afterFunc(c.n, d, f) }

// Go is idem.Clock's optional method: the proc runs when the scheduler picks it.
func (c clock) Go(f func()) { c.s.spawn(c.n, c.n.name()+" renewal", f) }
