package idem

import (
	"sync"
	"time"
)

// renewer renews the leases of an Engine's running handlers. One goroutine
// serves every lock of the Engine, and only while there is one: it starts
// with the first lock and exits at the first tick that finds none, so an
// idle Engine runs nothing and needs no Close. Registering a lock is a list
// insertion, cheaper than arming a timer per request. Renewals run one after
// another: a slow store delays the others, never the requests themselves.
type renewer struct {
	every time.Duration // Config.RenewEvery
	tick  time.Duration

	mu      sync.Mutex
	head    *Lock // intrusive list of the locks held
	running bool
}

func newRenewer(every time.Duration) *renewer {
	return &renewer{every: every, tick: max(every/4, time.Millisecond)}
}

// add registers l, first due at renewAt.
func (r *renewer) add(l *Lock, renewAt time.Time) {
	r.mu.Lock()
	l.renewAt = renewAt
	l.prev, l.next = nil, r.head
	if r.head != nil {
		r.head.prev = l
	}
	r.head = l
	if !r.running {
		r.running = true
		go r.loop()
	}
	r.mu.Unlock()
}

// remove unregisters l.
func (r *renewer) remove(l *Lock) {
	r.mu.Lock()
	if l.prev != nil {
		l.prev.next = l.next
	} else if r.head == l {
		r.head = l.next
	}
	if l.next != nil {
		l.next.prev = l.prev
	}
	l.prev, l.next = nil, nil
	r.mu.Unlock()
}

func (r *renewer) loop() {
	t := time.NewTicker(r.tick)
	defer t.Stop()
	var due []*Lock
	for now := range t.C {
		r.mu.Lock()
		if r.head == nil {
			r.running = false
			r.mu.Unlock()
			return
		}
		for l := r.head; l != nil; l = l.next {
			if !now.Before(l.renewAt) {
				l.renewAt = now.Add(r.every)
				due = append(due, l)
			}
		}
		r.mu.Unlock()
		// Outside the list's mutex: a slow store delays renewals, never
		// the requests registering and leaving.
		for _, l := range due {
			l.renew()
		}
		clear(due)
		due = due[:0]
	}
}
