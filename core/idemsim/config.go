package idemsim

import (
	"context"
	"errors"
	"slices"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// The model's own reading of the Engine's configuration (the world's
// params, which every engine is given): what each store call must ask for,
// judged from the settings themselves, never from what the Engine sends.
// An Engine that took a record's expiry or a lease from the wrong setting,
// or from a stale reading of its clock, is caught at the call that carries
// it.

// leaseInfo is what the model knows of one token's lease, as its Engine
// learnt it: the calls that reached the Engine back, not the store.
type leaseInfo struct {
	// answered is the node's clock when the Engine last had an answer to a
	// call on this lease (its Acquire, or a renewal, whatever it was): a
	// renewal is decided at a pass that comes after it.
	answered time.Time
	// grants are the ends of the lease as the Engine was told them, in
	// order: the Acquire's lease, moved on by each renewal that it was
	// told succeeded, each with the virtual time it was told.
	grants []grant
	// lockLost: the Engine was told the token holds no record
	// (idem.ErrLockLost from a renewal): its handler may be told at once.
	lockLost bool
	// slowAcquire: the Acquire that took it was slow to answer, or
	// failed, so the lease may have been nearly over when it did.
	slowAcquire bool
	// retryBy: a renewal of this lease came back failed at failedAt (but
	// for idem.ErrLockLost), and the Engine must try again at its next
	// renewal pass, by then (a tick later; see checkRetried).
	failedAt, retryBy time.Time
}

type grant struct{ at, until time.Time }

// grantedBefore is the end of the lease as the Engine knew it just before
// at: what a renewal pass at at goes by.
func (l *leaseInfo) grantedBefore(at time.Time) time.Time {
	var until time.Time
	for _, g := range l.grants {
		if !g.at.Before(at) {
			break
		}
		until = g.until
	}
	return until
}

func (m *model) lease(token string) *leaseInfo {
	l := m.leases[token]
	if l == nil {
		l = &leaseInfo{}
		m.leases[token] = l
	}
	return l
}

// nodeNow is n's clock, as its Engine reads it.
func (w *world) nodeNow(n *node) time.Time { return w.s.now.Add(n.skew) }

// checkAcquireAsked checks an Acquire as the Engine of n sends it: taken
// now, by n's clock, with a lease of Config.Lease and an expiry of
// Config.TTL from then.
func (m *model) checkAcquireAsked(n *node, a idem.Acquire) {
	w, p := m.w, &m.w.p
	now := w.nodeNow(n)
	switch {
	case !a.Now.Equal(now):
		w.violate(invPolicy, "%s asks to acquire %s as of %s, but its clock reads %s", n.name(), idName(a.ID), w.at(a.Now), w.at(now))
	case !a.LeaseUntil.Equal(a.Now.Add(p.lease)):
		w.violate(invPolicy, "%s asks to acquire %s with a lease of %s; Config.Lease is %s",
			n.name(), idName(a.ID), a.LeaseUntil.Sub(a.Now), p.lease)
	case !a.ExpiresAt.Equal(a.Now.Add(p.ttl)):
		w.violate(invPolicy, "%s asks to acquire %s with an expiry %s away; Config.TTL is %s",
			n.name(), idName(a.ID), a.ExpiresAt.Sub(a.Now), p.ttl)
	}
}

// checkCompleteAsked checks a Complete as the Engine of n sends it:
// completed now, by n's clock, and kept for Config.TTL from then.
func (m *model) checkCompleteAsked(n *node, id idem.ID, token string, c idem.Completion) {
	w, p := m.w, &m.w.p
	now := w.nodeNow(n)
	switch {
	case !c.CompletedAt.Equal(now):
		w.violate(invPolicy, "%s completes %s (%s) as of %s, but its clock reads %s", n.name(), idName(id), m.label(token), w.at(c.CompletedAt), w.at(now))
	case !c.ExpiresAt.Equal(c.CompletedAt.Add(p.ttl)):
		w.violate(invPolicy, "%s completes %s (%s) with an expiry %s after its completion; Config.TTL is %s",
			n.name(), idName(id), m.label(token), c.ExpiresAt.Sub(c.CompletedAt), p.ttl)
	}
}

// checkRenewAsked checks the lease a renewal by n asks for token: one
// Config.Lease from a reading of n's clock taken since the Engine last
// heard back about this lease (the renewal pass that found it due), and
// not from a later one.
func (m *model) checkRenewAsked(n *node, id idem.ID, token string, until time.Time) {
	w, p := m.w, &m.w.p
	now := w.nodeNow(n)
	from := until.Add(-p.lease)
	l := m.lease(token)
	switch {
	case from.After(now):
		w.violate(invPolicy, "%s renews %s (%s) until %s, more than Config.Lease (%s) from its clock's %s",
			n.name(), idName(id), m.label(token), w.at(until), p.lease, w.at(now))
	case from.Before(l.answered):
		w.violate(invPolicy, "%s renews %s (%s) until %s: that is Config.Lease (%s) from %s, before it last heard "+
			"back about this lease (%s); a renewal pass since must have asked for a lease from its own time",
			n.name(), idName(id), m.label(token), w.at(until), p.lease, w.at(from), w.at(l.answered))
	}
}

// answered notes that n's Engine heard back about token's lease: granted
// until then if ok, lost if the store said the token holds no record.
// From a renewer's tick before the end of each lease granted, the handler
// that holds it must have been told to stop (see leaseEnds).
func (m *model) answered(n *node, token string, ok bool, until time.Time, lost bool) {
	l := m.lease(token)
	l.answered = m.w.nodeNow(n)
	if k := len(l.grants); ok && (k == 0 || until.After(l.grants[k-1].until)) {
		l.grants = append(l.grants, grant{at: m.w.s.now, until: until})
		m.w.s.afterDaemon(until.Sub(l.answered)-m.w.p.tick(), func() { m.leaseEnds(token, until) })
	}
	if lost && !l.lockLost {
		l.lockLost = true
		m.w.s.afterDaemon(0, func() { m.toldLost(token) })
	}
}

// toldLost checks, once the step in which a renewal came back refused
// (idem.ErrLockLost) has ended, that the run holding the lease, if it still
// works, was told at once: another request holds its key, or an operator
// forgot it (see operator), and another run may take it.
func (m *model) toldLost(token string) {
	x := m.execOf[token]
	if x == nil || !x.running || x.exempt != "" || x.ctx == nil || x.ctx.Err() != nil {
		return
	}
	m.w.violate(invOneAtATime, "X%d (%s, %s) still works, untold, after its Engine's renewal was refused "+
		"(idem.ErrLockLost): its record is another's, or gone, and another run may take its key", x.n, idName(x.id), m.label(token))
}

// leaseEnds checks, a renewer's tick (RenewEvery/4) before the end of a
// lease granted until until, that the run holding it, if it is still
// working, was told to stop, unless a later renewal moved its end: the
// Engine tells a handler at least a tick before another request may take
// its key over, and invariant 1 rests on it (a handler stops within a tick
// of being told). An Engine that told it later, but still before the end,
// leaves a handler that takes most of a tick to stop running beside its
// successor, which the seeds rarely show.
func (m *model) leaseEnds(token string, until time.Time) {
	l := m.lease(token)
	if g := l.grants[len(l.grants)-1]; g.until.After(until) || l.lockLost {
		return
	}
	x := m.execOf[token]
	if x == nil || !x.running || x.exempt != "" || x.ctx == nil || x.ctx.Err() != nil {
		return
	}
	m.w.violate(invOneAtATime, "X%d (%s, %s) still works, untold, a tick (%s) before the end of the lease its Engine was "+
		"granted (%s): it may not stop before another request takes its key over", x.n, idName(x.id), m.label(token),
		ms(m.w.p.tick()), m.w.at(until))
}

// renewalCall notes a renewal call by n under way since start, and returns
// the function that notes its end with err. A call that failed (but for
// idem.ErrLockLost) or took longer than half a tick may have kept the
// Engine's other renewals waiting (see checkLeaseLost).
func (m *model) renewalCall(n *node) func(err error) {
	start := m.w.s.now
	n.renewals = append(n.renewals, start)
	if len(n.renewals) >= renewWorkers {
		n.workersBusy = start
	}
	return func(err error) {
		if len(n.renewals) >= renewWorkers {
			n.workersBusy = m.w.s.now
		}
		if i := slices.Index(n.renewals, start); i >= 0 {
			n.renewals = slices.Delete(n.renewals, i, i+1)
		}
		if err != nil && !errors.Is(err, idem.ErrLockLost) || m.w.s.now.Sub(start) > m.w.p.renewEvery/8 {
			n.slowRenewal = m.w.s.now
		}
	}
}

// renewWorkers is how many renewal calls an Engine makes at once (its
// renewal workers, as docs/concepts.md says): a renewal due while they are
// all busy waits for one of them.
const renewWorkers = 32

// renewalFailed notes that a renewal call of n for token's lease came back
// failed (but for idem.ErrLockLost, after which the Engine stops renewing
// it), now that the call has ended (see renewalCall). The documented
// schedule tries it again at the Engine's next renewal pass, a tick
// (RenewEvery/4) at most away, for as long as the run holds the key: the
// renewals a lease's span leaves room for are what keep a run's lease
// through a store's short outage (checkRetried).
func (m *model) renewalFailed(n *node, token string) {
	if t := m.tokens[token]; t == nil || t.recorded || t.released {
		return // its Engine is recording the outcome: the lock ends
	}
	l := m.lease(token)
	if !l.retryBy.IsZero() {
		return // the earlier failure is still to be retried
	}
	now := m.w.s.now
	l.failedAt, l.retryBy = now, now.Add(m.w.p.tick())
}

// workersHeld reports whether every one of n's renewal workers may have
// been busy between from and to, so that a renewal due at a pass then
// waited for one of them.
func (m *model) workersHeld(n *node, from, to time.Time) bool {
	return !n.workersBusy.Before(from)
}

// checkRetried checks, when n's Engine next calls the store for token's
// lease (a renewal, or the completion or release that ends its lock),
// that a renewal of it that failed was tried again by the next renewal
// pass, as docs/concepts.md promises ("a renewal that fails is tried again
// at the next pass"): an Engine that waited longer loses the lease of a
// healthy run to an outage shorter than its lease leaves room for. Exempt:
// a process that crashed or froze since the failure (its passes stood
// still), or whose renewal workers may have been held up (workersHeld).
func (m *model) checkRetried(n *node, token, what string) {
	l := m.leases[token]
	if l == nil || l.retryBy.IsZero() {
		return
	}
	failed, by := l.failedAt, l.retryBy
	l.failedAt, l.retryBy = time.Time{}, time.Time{}
	w := m.w
	if !w.s.now.After(by) || n.dead || !n.pausedUntil.Before(failed) || m.workersHeld(n, failed.Add(-w.p.tick()), by) {
		return
	}
	w.violate(invAnswered, "%s's renewal of %s (%s) failed at %s, and its Engine called the store for it again only at "+
		"%s (%s), %s later: a renewal that fails is tried again at the next pass, within a tick (%s), while the run "+
		"holds the key; a store down for less than the lease leaves room for would cost a run its lease",
		n.name(), idName(m.tokens[token].id), m.label(token), w.at(failed), w.at(w.s.now), what,
		ms(w.s.now.Sub(failed)), ms(w.p.tick()))
}

// checkLeaseLost judges a handler's or a job's run x that stopped because
// its context was cancelled with idem.ErrLeaseLost, which it saw at woke.
// The Engine says so when the store refused a renewal (idem.ErrLockLost),
// or when the lease it was granted is about to run out unrenewed: never
// more than a renewal interval before its end, by its node's clock, and
// only if its renewals could not be made in time: its own Acquire, or
// some renewal call of its node, was slow or failed since a lease and a
// renewal interval before, or one is still under way.
func (m *model) checkLeaseLost(x *exec, ctx context.Context, woke time.Time) {
	if !errors.Is(context.Cause(ctx), idem.ErrLeaseLost) || x.exempt != "" {
		return
	}
	w, p := m.w, &m.w.p
	l := m.lease(x.token)
	if l.lockLost {
		return
	}
	granted := l.grantedBefore(woke)
	if early := granted.Sub(woke.Add(x.node.skew)); early > p.renewEvery {
		w.violate(invPolicy, "X%d (%s, %s) was told its lease is lost %s before the end of the lease its Engine was "+
			"granted (%s), with no renewal refused: a lease is given up at most a renewal interval (%s) before its end",
			x.n, idName(x.id), m.label(x.token), ms(early), w.at(granted), p.renewEvery)
		return
	}
	n := x.node
	since := woke.Add(-p.lease - p.renewEvery)
	if l.slowAcquire || n.slowRenewal.After(since) || len(n.renewals) > 0 && n.renewals[0].Before(woke.Add(-p.renewEvery/8)) {
		return
	}
	w.violate(invAnswered, "X%d (%s, %s) was told its lease ran out (granted until %s), while every renewal call of %s "+
		"since %s answered at once: the Engine must renew a lease its store renews",
		x.n, idName(x.id), m.label(x.token), w.at(granted), n.name(), w.at(since))
}

// partialRenewal is the idem.PartialRenewal of a batch that one node of a
// store spread over several failed: the leases of that node were not
// renewed, or were and the answer was lost.
type partialRenewal struct{ sick []bool }

var _ idem.PartialRenewal = partialRenewal{}

func (partialRenewal) Error() string          { return "idemsim: injected failure of one node of the store" }
func (e partialRenewal) Unrenewed(i int) bool { return e.sick[i] }
