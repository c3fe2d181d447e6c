package idem

import "testing"

// TestLockStateMachine lists every transition of a Lock's life; any pair
// not listed leaves the state as it is.
func TestLockStateMachine(t *testing.T) {
	type edge struct {
		from lockState
		ev   lockEvent
	}
	changes := map[edge]lockState{
		{lockRunning, lockLeaseLost}:   lockTold,
		{lockRunning, lockReturned}:    lockFinishing,
		{lockTold, lockReturned}:       lockFinishing,
		{lockRunning, lockLeftRunning}: lockLeftToLease,
		{lockTold, lockLeftRunning}:    lockLeftToLease,
		{lockFinishing, lockRecorded}:  lockEnded,
	}
	for from := lockRunning; from <= lockLeftToLease; from++ {
		for ev := lockLeaseLost; ev <= lockRecorded; ev++ {
			to, changed := from.next(ev)
			want, ok := changes[edge{from, ev}]
			if !ok {
				want = from
			}
			if to != want || changed != ok {
				t.Errorf("%v on event %d: %v (changed %v), want %v (changed %v)", from, ev, to, changed, want, ok)
			}
		}
	}
}
