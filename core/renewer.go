package idem

import (
	"context"
	"errors"
	"sync"
	"time"
)

// renewer renews the leases of an Engine's running handlers. A pass runs
// every tick (RenewEvery/4) while at least one lock is held, on the
// Engine's clock, and stops at the first pass that finds none, so an idle
// Engine runs nothing and needs no Close. Registering a lock is a list
// insertion.
//
// A pass never waits for the store. It queues the due renewals for at most
// maxRenewCalls workers, each of which makes one renewal call after another
// until the queue is empty: a RenewBatch call per maxBatchRenewal leases
// when the store has that capability, and a Renew call per lease
// otherwise. Each call runs under a deadline of its own. So the renewals
// keep pace with the store's speed, not with the tick: a pass costs about
// one store round trip with batches, as long as n/maxBatchRenewal calls
// fit the workers (and the store's connections), and n/maxRenewCalls
// round trips without. A store that hangs delays no lock's check, and
// holds up one worker, not the others. A pass also cancels the handler of
// every lock whose lease is about to run out unrenewed (renewals failed or
// are stuck): from the lease's end another request may take the key over,
// and the handler must have been told to stop at least one tick before
// then.
type renewer struct {
	e     *Engine
	tick  time.Duration
	guard time.Duration // a handler is stopped within this of its lease's end, unrenewed
	batch BatchRenewer  // the store's capability, or nil
	spawn Spawner       // the clock's capability, or nil: start renewals with go

	mu      sync.Mutex
	head    *lock     // intrusive list of the locks held
	timer   Timer     // the next pass; nil when idle
	queue   []renewal // due renewals waiting for a worker
	workers int       // workers making renewal calls
	busy    int       // of them, those in a store call
	due     []*lock
}

// maxRenewCalls bounds the concurrent renewal calls of one Engine: the
// number of its renewal workers.
const maxRenewCalls = 32

// maxBatchRenewal bounds the leases one RenewBatch call renews, so that a
// call stays well within its deadline however many handlers run, and the
// calls for many of them share the workers (and the store's connections).
const maxBatchRenewal = 256

func newRenewer(e *Engine) *renewer {
	every := e.cfg.RenewEvery
	r := &renewer{e: e, tick: max(every/4, time.Millisecond)}
	// The first pass that finds a lease within guard of its end comes less
	// than a tick after the lease entered that span, wherever the lease
	// falls between passes: so two ticks tell the handler between one and
	// two ticks before another request may take the key over. A handler
	// that stops within a tick of being told never overlaps its successor.
	r.guard = 2 * r.tick
	r.batch, _ = e.cfg.Store.(BatchRenewer)
	r.spawn, _ = e.clock.(Spawner)
	return r
}

// tooLate reports whether a lease until leaseEnd is already within the
// guard: a handler starting on it could not be told to stop a tick before
// its end.
func (r *renewer) tooLate(leaseEnd, now time.Time) bool {
	return !now.Before(leaseEnd.Add(-r.guard))
}

// callTimeout is the deadline of one renewal call: short enough that a
// stuck call leaves time for the next attempt within the lease.
func (r *renewer) callTimeout() time.Duration {
	return min(r.e.cfg.StoreTimeout, max(r.e.cfg.RenewEvery/2, time.Millisecond))
}

// add registers l, first due at renewAt, its lease running until leaseEnd.
func (r *renewer) add(l *lock, renewAt, leaseEnd time.Time) {
	r.mu.Lock()
	l.renewAt, l.leaseEnd, l.held = renewAt, leaseEnd, true
	l.prev, l.next = nil, r.head
	if r.head != nil {
		r.head.prev = l
	}
	r.head = l
	if r.timer == nil {
		r.timer = r.e.clock.AfterFunc(r.tick, r.pass)
	}
	r.mu.Unlock()
}

// remove unregisters l.
func (r *renewer) remove(l *lock) {
	r.mu.Lock()
	if l.prev != nil {
		l.prev.next = l.next
	} else if r.head == l {
		r.head = l.next
	}
	if l.next != nil {
		l.next.prev = l.prev
	}
	l.prev, l.next, l.held = nil, nil, false
	r.mu.Unlock()
}

// pass is one tick: stop handlers whose lease is about to run out, and
// start the renewals that are due.
func (r *renewer) pass() {
	now := r.e.clock.Now()
	r.mu.Lock()
	if r.head == nil {
		r.timer = nil
		r.mu.Unlock()
		return
	}
	due := r.due[:0]
	var risky []*lock
	for l := r.head; l != nil; l = l.next {
		if l.disowned {
			continue
		}
		if !now.Before(l.leaseEnd.Add(-r.guard)) {
			risky = append(risky, l)
		}
		if !l.renewing && !now.Before(l.renewAt) {
			due = append(due, l)
		}
	}
	leaseUntil := now.Add(r.e.cfg.Lease)
	for _, l := range due {
		l.renewing = true
	}
	if r.batch != nil {
		for start := 0; start < len(due); start += maxBatchRenewal {
			batch := append([]*lock(nil), due[start:min(start+maxBatchRenewal, len(due))]...)
			r.queue = append(r.queue, renewal{batch: batch, start: now, leaseUntil: leaseUntil})
		}
	} else {
		for _, l := range due {
			r.queue = append(r.queue, renewal{l: l, start: now, leaseUntil: leaseUntil})
		}
	}
	// A worker in a call (one the store is slow to answer) takes nothing
	// queued until the call ends, so the queue gets workers of its own.
	for r.workers < maxRenewCalls && r.workers-r.busy < len(r.queue) {
		r.workers++
		r.start(r.work)
	}
	r.timer = r.e.clock.AfterFunc(r.tick, r.pass)
	clear(due)
	r.due = due[:0]
	r.mu.Unlock()
	for _, l := range risky {
		l.loseLease(errLeaseRanOut)
	}
}

// start runs f on a goroutine of its own, through the clock if it is a
// spawner.
func (r *renewer) start(f func()) {
	if r.spawn != nil {
		r.spawn.Go(f)
		return
	}
	go f()
}

// errLeaseRanOut says why a handler whose store did not refuse its renewals
// was still told its lease is lost.
var errLeaseRanOut = leaseRanOutError{}

type leaseRanOutError struct{}

func (leaseRanOutError) Error() string {
	return "the lease is about to run out: renewals failed or did not answer in time"
}

// renewal is a queued renewal call: one lock for Renew, or a batch of them
// for RenewBatch; when the pass that found them due ran, and the lease it
// asks for.
type renewal struct {
	l                 *lock
	batch             []*lock
	start, leaseUntil time.Time
}

// work makes the queued renewal calls one after another until the queue is
// empty, then ends. Locks that ended while queued are left out.
func (r *renewer) work() {
	r.mu.Lock()
	for len(r.queue) > 0 {
		q := r.queue[0]
		r.queue[0] = renewal{}
		r.queue = r.queue[1:]
		if q.batch == nil {
			if !q.l.held {
				q.l.renewing = false
				continue
			}
			r.busy++
			r.mu.Unlock()
			r.renewOne(q.l, q.start, q.leaseUntil)
			r.mu.Lock()
			r.busy--
			continue
		}
		locks := q.batch[:0]
		for _, l := range q.batch {
			if l.held {
				locks = append(locks, l)
			} else {
				l.renewing = false
			}
		}
		if len(locks) > 0 {
			r.busy++
			r.mu.Unlock()
			r.renewBatch(locks, q.start, q.leaseUntil)
			r.mu.Lock()
			r.busy--
		}
	}
	r.queue = r.queue[:0:0] // let the backing array go once drained
	r.workers--
	r.mu.Unlock()
}

func (r *renewer) renewOne(l *lock, start, leaseUntil time.Time) {
	// The request's values (its trace) without its cancellation: the lease
	// must be renewed whatever became of the client.
	ctx, cancel := r.e.timeoutContext(context.WithoutCancel(l.requestContext()), r.callTimeout())
	began := time.Now()
	err := r.e.cfg.Store.Renew(ctx, l.id, l.token, leaseUntil)
	done := time.Now()
	cancel()
	r.mu.Lock()
	r.settle(l, err, start, leaseUntil)
	r.mu.Unlock()
	l.renewed(err, began, done)
}

func (r *renewer) renewBatch(locks []*lock, start, leaseUntil time.Time) {
	held := make([]Held, len(locks))
	for i, l := range locks {
		held[i] = Held{ID: l.id, Token: l.token}
	}
	lost := make([]bool, len(locks))
	ctx, cancel := r.e.timeoutContext(context.Background(), r.callTimeout())
	began := time.Now()
	err := r.batch.RenewBatch(ctx, held, leaseUntil, lost)
	done := time.Now()
	cancel()
	errs := make([]error, len(locks))
	var partial PartialRenewal
	isPartial := errors.As(err, &partial)
	r.mu.Lock()
	for i, l := range locks {
		switch {
		case err != nil && (!isPartial || partial.Unrenewed(i)):
			errs[i] = err
		case lost[i]:
			errs[i] = ErrLockLost
		}
		r.settle(l, errs[i], start, leaseUntil)
	}
	r.mu.Unlock()
	for i, l := range locks {
		l.renewed(errs[i], began, done)
	}
}

// settle records a renewal's outcome in l's schedule; the caller holds r.mu.
// A renewal that succeeded moves the lease to what the store was told; one
// that failed is tried again at the next pass.
func (r *renewer) settle(l *lock, err error, start, leaseUntil time.Time) {
	l.renewing = false
	if errors.Is(err, ErrLockLost) {
		l.disowned = true
	}
	if err == nil {
		l.renewAt = start.Add(r.e.cfg.RenewEvery)
		if leaseUntil.After(l.leaseEnd) {
			l.leaseEnd = leaseUntil
		}
		return
	}
	l.renewAt = start
}
