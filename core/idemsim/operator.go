package idemsim

import (
	"context"
	"errors"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemadmin"
)

// The operator forgets, now and then, the key of a run in flight, with
// force (idemadmin.Store.Forget, as idemctl forget -force and the admin
// endpoint do): the store deletes the record, whoever holds it, so that
// the key may run again. That is the operator's decision, so a run of the
// key may start at once beside the one still working (invariant 1 allows
// it for a key forgotten), but the old run must not go on as if it held
// the key:
//
//   - its Engine hears it at its next renewal (idem.ErrLockLost), and must
//     tell it at once (model.toldLost), in a batch as lease by lease;
//   - once the chaos is over, when every renewal answers, it is told
//     within a renewal interval and two ticks of the forget
//     (model.forgottenTold): a renewal is due at most a renewal interval
//     after the last, and a pass finds it due within a tick;
//   - its completion is refused (fencing), so its response is never
//     replayed as the key's outcome, nor reported as recorded (invariants
//     3 and 7, through exec.withheld and the shadow).

// operator forgets p.forgets keys of runs in flight, at times drawn over
// the chaos, the last within a lease after it, on a store that implements
// idemadmin.Store; it talks to the store directly, as idemctl does through
// its DSN, not through an engine's network.
func (w *world) operator() {
	s := w.s
	admin, ok := w.store.(idemadmin.Store)
	if !ok {
		return
	}
	// During the chaos, and the last once it is over, when the judgement
	// of how soon the old holder is told is strict (forgottenTold).
	var times []time.Duration
	for range w.p.forgets - 1 {
		times = append(times, msBetween(w.rng, 0, w.p.chaos))
	}
	sortDurations(times)
	times = append(times, w.p.chaos+msBetween(w.rng, 0, w.p.lease))
	for _, t := range times {
		s.wait(epoch.Add(t), nil, nil)
		var running []*exec
		for _, x := range w.m.execs {
			if x.running && !x.forgotten && !x.node.isDead() {
				running = append(running, x)
			}
		}
		if len(running) == 0 {
			w.tracef("the operator finds no key in flight to forget")
			continue
		}
		x := running[w.rng.IntN(len(running))]
		w.tracef("the operator forgets %s (X%d runs for it as %s), with force", idName(x.id), x.n, w.m.label(x.token))
		err := admin.Forget(context.Background(), x.id, true)
		w.m.observeForget(x.id, err)
	}
}

// observeForget follows an operator's Forget of id, with force, in the
// shadow: the record is gone, whoever held it, and the run holding it, if
// it still works, is forgotten (see operator). A record that does not
// exist gives idem.ErrNotFound; one expired may be gone already.
func (m *model) observeForget(id idem.ID, err error) {
	w := m.w
	s := m.shadow[id]
	exists := s != nil && s.rec.State != 0
	w.tracef("forget %s → %v", idName(id), errName(err))
	switch {
	case errors.Is(err, idemadmin.ErrChanged):
		// The store saw the record change between its read and its
		// delete (a completion being written): nothing is forgotten.
		return
	case err != nil && !errors.Is(err, idem.ErrNotFound):
		m.ownError("Forget", err)
		return
	case err == nil && !exists:
		m.contractf("Forget of %s succeeded, but the store holds no record of it", idName(id))
	case err != nil && exists && !expiredAt(s.rec, w.s.now):
		m.contractf("Forget of %s returned ErrNotFound, but the store holds %s", idName(id), m.describe(s.rec))
	}
	if !exists {
		return
	}
	if x := m.execOf[s.rec.Token]; x != nil && s.rec.State == idem.InFlight && x.running {
		x.forgotten = true
		if !w.s.now.Before(w.calmAt) && x.exempt == "" {
			at := w.s.now
			w.s.afterDaemon(w.p.renewEvery+2*w.p.tick(), func() { m.forgottenTold(x, at) })
		}
	}
	s.rec = idem.Record{}
}

// forgottenTold checks, a renewal interval and two ticks after an
// operator forgot x's key once the chaos was over, that x, if it still
// works, was told its lease is lost: its Engine renewed its lease since,
// and the store refused.
func (m *model) forgottenTold(x *exec, at time.Time) {
	if !x.running || x.exempt != "" || x.node.isDead() || x.ctx == nil || x.ctx.Err() != nil {
		return
	}
	m.w.violate(invOneAtATime, "X%d (%s, %s) still works, untold, %s after an operator forgot its key (at %s): "+
		"its Engine must hear it at its next renewal, and tell it", x.n, idName(x.id), m.label(x.token),
		ms(m.w.s.now.Sub(at)), m.w.at(at))
}
