package idemsim

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	idem "github.com/idemkit/idemkit/core"
)

// The judgement of jobs (Engine.Do) by the oracle, from the contract of
// idem.Job and Engine.Do, on evidence as for requests: which run served a
// delivery is known from the runs the jobs report, and which run a
// replayed outcome comes from, from the record the store answered the
// delivery's Acquire with (its token names the run that took it), checked
// against what that run returned and whether its completion committed.
//
// Do's contract, as judged here: the first delivery runs the job under
// the key and records its result (unless larger than MaxResponseBody);
// a later delivery of the same job gets that result, byte for byte, or the
// recorded permanent failure, as an *idem.PermanentError with its message
// alone, without running; while another run holds the key it gets
// ErrInProgress; another job (name or payload) under the key gets
// ErrKeyReused, and the same job never does; an error the job does not
// mark permanent is returned as it is, nothing is recorded, and the key
// is released, as it is after a panic, which goes on to the caller; the
// job's context is cancelled only with idem.ErrLeaseLost,
// idem.ErrHandlerTimeout, or its caller's context; when nothing ran, the
// error is ErrInProgress, ErrKeyReused, ErrStoreUnavailable, ErrStoreFull
// or the caller's context's.

// jobEnds records how x's job ends and returns what the job returns: its
// result, or err. Do gets a copy of the result, so that what x returned
// stays as it was, whatever the Engine does with it.
func (m *model) jobEnds(x *exec, fate jobFate, err error) ([]byte, error) {
	x.fate, x.ferr = fate, err
	outcome := fmt.Sprintf("returned %d bytes", len(x.result))
	if err != nil {
		outcome = "returned " + err.Error()
		if fate == fatePermanent {
			outcome += " (permanent)"
		}
	}
	m.endExec(x, outcome)
	return bytes.Clone(x.result), err
}

// checkJobStart judges a job that starts for att: it holds the key its
// delivery asked for, with the token the store gave it as new or taken
// over, never one the store found held or completed.
func (m *model) checkJobStart(att *attempt, held idem.Held) {
	w := m.w
	if held.ID != att.lr.id {
		w.violate(invOneAtATime, "%s: the job holds %s, not its own key %s (HeldKey gives a job's scope and key as given)",
			att.name, idName(held.ID), idName(att.lr.id))
	}
	a := att.acquired
	switch {
	case a == nil:
		w.violate(invPolicy, "%s: the job runs, but the store never answered its Acquire", att.name)
	case a.out == idem.AcquireExisting:
		w.violate(invPolicy, "%s: the job runs, but the store found %s's record (%s) and gave it no key", att.name, idName(att.id), m.describe(a.rec))
	case held.Token != att.token:
		w.violate(invPolicy, "%s: the job runs under %s, not the token its Acquire took (%s)", att.name, m.label(held.Token), m.label(att.token))
	}
}

// checkCause judges why a job's context was cancelled: its lease was lost,
// its time (HandlerTimeout) ran out, or its caller's context ended.
func (m *model) checkCause(x *exec, caller context.Context, cause error) {
	switch {
	case errors.Is(cause, idem.ErrLeaseLost):
	case errors.Is(cause, idem.ErrHandlerTimeout) && m.w.p.handlerTimeout > 0:
	case caller.Err() != nil:
	default:
		m.w.violate(invPolicy, "X%d (%s) was stopped with %v, while its delivery's context was live: a job is stopped only "+
			"for a lost lease (ErrLeaseLost), its timeout, or its caller", x.n, x.att.name, cause)
	}
}

// checkDelivery judges what Do returned for a delivery that ran to its
// end, then scribbles over the result, as a caller may: it is the
// caller's own.
func (m *model) checkDelivery(dv *delivery) {
	var perm *idem.PermanentError
	switch {
	case dv.att.exec != nil:
		m.checkJobRun(dv, dv.att.exec)
	case dv.panicked:
		m.w.violate(invPolicy, "%s: Do panicked, yet no job ran for it", dv.att.name)
	case dv.err == nil:
		m.checkJobReplay(dv, nil)
	case errors.As(dv.err, &perm):
		m.checkJobReplay(dv, perm)
	default:
		m.checkJobRefused(dv)
	}
	for i := range dv.result {
		dv.result[i] = '#'
	}
}

// checkJobRun judges what Do returned for a delivery whose job ran: what
// the job returned, or its panic; a failure that is not permanent
// releases the key. Do reports success (the result, or the permanent
// failure) only for an outcome whose completion committed; otherwise it
// says why: ErrNotRecorded with the result in hand (the work stands),
// ErrRolledBack (the work was undone with the completion), or ErrLockLost
// (another run holds the key, so the result is not returned).
func (m *model) checkJobRun(dv *delivery, x *exec) {
	w, att := m.w, dv.att
	rolledBack := w.effects != nil && errors.Is(dv.err, idem.ErrRolledBack)
	lockLost := errors.Is(dv.err, idem.ErrLockLost)
	notRecorded := errors.Is(dv.err, idem.ErrNotRecorded)
	switch x.fate {
	case fateResult:
		switch {
		case dv.panicked || rolledBack || lockLost && dv.result == nil:
		case dv.err == nil && !x.committed:
			w.violate(invPolicy, "%s ran X%d, whose result was not recorded, yet Do reported success", att.name, x.n)
		case (dv.err != nil && !notRecorded) || !bytes.Equal(dv.result, x.result):
			w.violate(invReplay, "%s ran X%d, which returned %d bytes, yet Do returned %s", att.name, x.n, len(x.result), dv)
		}
		if dv.panicked {
			w.violate(invReplay, "%s ran X%d, which returned %d bytes, yet Do panicked", att.name, x.n, len(x.result))
		}
		if len(x.result) <= w.p.maxBody {
			m.checkRecorded(x)
		}
	case fatePermanent:
		var perm *idem.PermanentError
		permanent := errors.Is(dv.err, x.ferr) && errors.As(dv.err, &perm) && perm.Msg == x.msg
		switch {
		case rolledBack || lockLost && !permanent:
		case !permanent:
			w.violate(invPolicy, "%s ran X%d, which failed permanently (%q), yet Do returned %s", att.name, x.n, x.msg, dv)
		case !notRecorded && !x.committed:
			w.violate(invPolicy, "%s ran X%d, whose permanent failure was not recorded, yet Do reported it as recorded (%s)", att.name, x.n, dv)
		}
		m.checkRecorded(x)
	case fateFailed:
		if dv.panicked || !errors.Is(dv.err, x.ferr) {
			w.violate(invPolicy, "%s ran X%d, which failed (%v), yet Do returned %s, not the job's own error", att.name, x.n, x.ferr, dv)
		}
		m.checkReleased(x)
	case fatePanicked:
		if !dv.panicked {
			w.violate(invPolicy, "%s ran X%d, which panicked, yet Do returned %s: the panic goes on to the caller", att.name, x.n, dv)
		}
		m.checkReleased(x)
	}
}

// checkRecorded judges the end of a run that returned a result (no larger
// than MaxResponseBody) or failed permanently: Do asked the store to
// record it before returning, so that later deliveries get it without
// running the job (unless that call failed: then a later delivery may run
// it again, as the store's record says nothing).
func (m *model) checkRecorded(x *exec) {
	if t := m.tokens[x.token]; t == nil || !t.recorded {
		m.w.violate(invPolicy, "X%d (%s) %s, and Do returned without asking the store to record it: the next delivery runs the job again",
			x.n, x.att.name, fateNames[x.fate])
	}
}

// checkReleased judges the end of a run that failed, not permanently, or
// panicked: nothing is recorded for it (see checkJobStored), and the key
// is released before Do returns, so that the next delivery runs the job
// again at once, not once the lease has run out.
func (m *model) checkReleased(x *exec) {
	if t := m.tokens[x.token]; t == nil || !t.released {
		m.w.violate(invPolicy, "X%d (%s) %s, and Do returned without releasing %s (%s): the next delivery waits out the lease",
			x.n, x.att.name, fateNames[x.fate], idName(x.id), m.label(x.token))
	}
}

// checkJobReplay judges a result (perm nil) or a permanent failure that a
// delivery got with no run of its own: the outcome recorded by the run
// that holds the record the store answered with, for the same job.
func (m *model) checkJobReplay(dv *delivery, perm *idem.PermanentError) {
	w, att := m.w, dv.att
	a := att.acquired
	if a == nil || a.out != idem.AcquireExisting {
		w.violate(invReplay, "%s got %s, yet no job ran for it and the store found no record for it", att.name, dv)
		return
	}
	x := m.execOf[a.rec.Token]
	switch {
	case x == nil:
		w.violate(invReplay, "%s got %s from %s's record, whose job never ran", att.name, dv, m.label(a.rec.Token))
	case !x.committed:
		w.violate(invReplay, "%s got %s from X%d, whose completion never reached the store", att.name, dv, x.n)
	case !sameWork(x.att, att):
		w.violate(invReplay, "%s (%s, %s) got %s from X%d, which ran other work: %s (%s)",
			att.name, att.target(), att.what, dv, x.n, x.att.name, x.att.what)
	case perm == nil && (x.fate != fateResult || !bytes.Equal(dv.result, x.result)):
		w.violate(invReplay, "%s got a result of %d bytes (%s) again without running, not what X%d recorded (it %s, %d bytes)",
			att.name, len(dv.result), excerpt(dv.result), x.n, fateNames[x.fate], len(x.result))
	case perm != nil && (x.fate != fatePermanent || perm.Msg != x.msg || perm.Unwrap() != nil):
		w.violate(invReplay, "%s got the permanent failure %q (cause %v) again without running, not what X%d recorded (it %s: %q)",
			att.name, perm.Msg, perm.Unwrap(), x.n, fateNames[x.fate], x.msg)
	}
}

// checkJobRefused judges an error a delivery got with no run of its own.
func (m *model) checkJobRefused(dv *delivery) {
	w, att, err := m.w, dv.att, dv.err
	first := m.origin(att)
	switch {
	case errors.Is(err, idem.ErrKeyReused):
		if first == nil || sameWork(first, att) {
			w.violate(invPolicy, "%s (%s) got ErrKeyReused, but the store found no record of %s for other work (%s)",
				att.name, att.what, idName(att.id), m.originName(att))
		}
	case errors.Is(err, idem.ErrInProgress):
		if first == nil || !sameWork(first, att) || att.acquired.rec.State != idem.InFlight {
			w.violate(invPolicy, "%s (%s) got ErrInProgress, but the store found no run of the same job holding %s (%s)",
				att.name, att.what, idName(att.id), m.originName(att))
		}
	case errors.Is(err, idem.ErrStoreUnavailable), errors.Is(err, idem.ErrStoreFull):
	case dv.ctx.Err() != nil && errors.Is(err, dv.ctx.Err()):
	default:
		w.violate(invPolicy, "%s: Do ran nothing and returned %v, which its contract does not list", att.name, err)
	}
}

// originName says what the store answered att's Acquire with, for
// messages.
func (m *model) originName(att *attempt) string {
	a := att.acquired
	if a == nil {
		return "it never answered"
	}
	if first := m.origin(att); first != nil {
		return fmt.Sprintf("it answered %s of %s, %s", a.out, first.name, m.describe(a.rec))
	}
	return fmt.Sprintf("it answered %s", a.out)
}

// checkJobStored judges what the Engine asks the store to record for x, a
// job's run: its result, whole, if no larger than MaxResponseBody, or its
// permanent failure's message with status 422; nothing for any other end.
func (m *model) checkJobStored(x *exec, c idem.Completion) {
	w, r := m.w, c.Response
	switch x.fate {
	case fateResult:
		if len(x.result) > w.p.maxBody {
			w.violate(invPolicy, "the Engine records X%d's result of %d bytes, larger than MaxResponseBody (%d)", x.n, len(x.result), w.p.maxBody)
		} else if r.Status < 200 || r.Status > 299 || !bytes.Equal(r.Body, x.result) {
			w.violate(invPolicy, "the Engine records %d with %d bytes for X%d, whose result is %d bytes", r.Status, len(r.Body), x.n, len(x.result))
		}
	case fatePermanent:
		if r.Status != 422 || string(r.Body) != x.msg {
			w.violate(invPolicy, "the Engine records %d %q for X%d, which failed permanently with %q", r.Status, excerpt(r.Body), x.n, x.msg)
		}
	default:
		w.violate(invPolicy, "the Engine records %d with %d bytes for X%d, which %s: only a result or a permanent failure is recorded",
			r.Status, len(r.Body), x.n, fateNames[x.fate])
	}
}
