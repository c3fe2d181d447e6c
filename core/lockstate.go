package idem

// lockState is where a Lock is in its life. Every change goes through
// next, under Lock.mu.
//
//	running ──lease lost──▶ told
//	running, told ──handler returned──▶ finishing ──outcome recorded──▶ ended
//	running, told ──answered while the handler may run──▶ leftToLease
type lockState uint8

const (
	// lockRunning: the handler runs, its lease renewed.
	lockRunning lockState = iota
	// lockTold: the handler runs, and its context was cancelled with
	// ErrLeaseLost: another request took the key over, or the lease is
	// about to run out while renewals fail (they go on being tried).
	lockTold
	// lockFinishing: the handler returned and its outcome is being
	// recorded; the lease is still renewed, and the handler's context is
	// left alone (a transactional completion may be committing on it).
	lockFinishing
	// lockEnded: the outcome is recorded, or the key released.
	lockEnded
	// lockLeftToLease: ended while the handler may still be running (a
	// timeout middleware inside idemkit answered for it): the key waits
	// for its lease to run out, unrenewed.
	lockLeftToLease
)

var lockStateNames = [...]string{lockRunning: "running", lockTold: "told", lockFinishing: "finishing",
	lockEnded: "ended", lockLeftToLease: "left-to-lease"}

// String returns the state's name.
func (s lockState) String() string {
	if int(s) < len(lockStateNames) {
		return lockStateNames[s]
	}
	return "unknown"
}

// lockEvent is what happens to a Lock.
type lockEvent uint8

const (
	lockLeaseLost   lockEvent = iota // the renewer learnt the lease is lost, or about to run out
	lockReturned                     // the adapter ends the Lock: Finish or Abandon
	lockLeftRunning                  // the adapter ends the Lock while the handler may still run
	lockRecorded                     // the outcome is recorded (or the key released)
)

// next is the Lock's state machine: the state after ev happens in s, and
// whether ev changes anything. An event that does not apply in s (a lease
// lost after the handler returned, a second end) leaves it as it is.
func (s lockState) next(ev lockEvent) (lockState, bool) {
	switch {
	case ev == lockLeaseLost && s == lockRunning:
		return lockTold, true
	case ev == lockReturned && s.handlerRuns():
		return lockFinishing, true
	case ev == lockLeftRunning && s.handlerRuns():
		return lockLeftToLease, true
	case ev == lockRecorded && s == lockFinishing:
		return lockEnded, true
	}
	return s, false
}

// handlerRuns reports whether the handler has not returned in s, as far
// as the Engine knows.
func (s lockState) handlerRuns() bool { return s == lockRunning || s == lockTold }

// move applies ev to l's state and reports whether it changed it, and
// what the state was.
func (l *lock) move(ev lockEvent) (from lockState, changed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	from = l.state
	l.state, changed = from.next(ev)
	return from, changed
}
