// Package acquireorder chooses, for a store whose acquisition takes two
// steps on a miss, which step it tries first: the read that finds a live
// record (a replay, a 409), or the write that creates a new one.
//
// Either order is correct, since each step is atomic on its own and the
// write changes nothing if the key is taken; only the number of round
// trips differs. Read first: one for a live record, two for a new key.
// Write first: one for a new key, two for a live record. An Order follows
// what the store's recent acquisitions found, so that the common case of
// the moment costs one: new keys in ordinary traffic, live records in a
// storm of retries.
package acquireorder

import "sync/atomic"

// Bound is how far an Order leans either way: after that many more live
// records than writes in a row (or the reverse) it has settled, and as
// many of the other kind turn it round again.
const Bound = 8

// Order is the tally. Its zero value writes first. It is safe for
// concurrent use; a tally lost to a concurrent one costs nothing but a
// round trip.
type Order struct {
	n atomic.Int32 // > 0: live records lately the more common
}

// ReadFirst reports whether the next acquisition should read before it
// writes.
func (o *Order) ReadFirst() bool { return o.n.Load() > 0 }

// Saw counts one acquisition: found, if it found a live record; not, if
// it wrote one.
func (o *Order) Saw(found bool) {
	n := o.n.Load()
	switch {
	case found && n < Bound:
		o.n.CompareAndSwap(n, n+1)
	case !found && n > -Bound:
		o.n.CompareAndSwap(n, n-1)
	}
}
