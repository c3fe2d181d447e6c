package idemsim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// faultStore is the store as one engine process sees it: every call
// travels to the store and back with a latency, and may fail, hang or
// come back ambiguous, as the weather of the moment says. The call itself
// reaches the real store in one step of the scheduler, at one instant of
// virtual time, so the store's answer depends only on the order of the
// calls, which the seed fixes.
type faultStore struct {
	w *world
	n *node
}

// batchFaultStore adds idem.BatchRenewer when the store under test has it.
type batchFaultStore struct{ *faultStore }

var (
	_ idem.Store        = (*faultStore)(nil)
	_ idem.BatchRenewer = batchFaultStore{}
)

// errInjected is the error of a failed call.
var errInjected = errors.New("idemsim: injected store failure")

// fault is what happens to one call.
type fault uint8

const (
	faultNone       fault = iota
	faultFailBefore       // fails without reaching the store
	faultFailAfter        // reaches the store (its write commits), then fails
	faultHang             // never reaches the store; the caller waits for its deadline
	faultHangAfter        // reaches the store, then the answer never comes
)

var faultNames = [...]string{"slow", "fails", "commits then fails", "hangs", "commits then hangs"}

type callPlan struct {
	pre, post time.Duration // travel to the store, and back
	fault     fault
	ghost     bool          // if the caller gives up before it arrives, it still lands (remote stores)
	late      time.Duration // how long after the caller gave up a ghost lands
}

// call runs one store call: apply makes the real call and records its
// answer in the model. It returns the error the caller sees.
func (f *faultStore) call(ctx context.Context, what string, apply func(context.Context) error, ghost func()) error {
	w, s := f.w, f.w.s
	pl := w.planCall(f.n)
	if pl.fault != faultNone || pl.pre+pl.post > w.p.storeTimeout/2 {
		w.tracef("%s: %s, %s there, %s back", what, faultNames[pl.fault], ms(pl.pre), ms(pl.post))
	}
	landLate := func(how string) {
		if !pl.ghost || ghost == nil {
			return
		}
		w.tracef("%s: the caller gave up %s; the call lands %s later", what, how, ms(pl.late))
		s.spawn(nil, "ghost", func() {
			s.sleep(pl.late)
			w.tracef("%s lands, long after its caller gave up", what)
			ghost()
		})
	}
	if !s.sleepCtx(ctx, pl.pre) {
		if pl.fault != faultFailBefore {
			landLate("on its way")
		}
		return fmt.Errorf("idemsim: %s: %w", what, ctx.Err())
	}
	switch pl.fault {
	case faultFailBefore:
		s.sleepCtx(ctx, pl.post)
		return errInjected
	case faultHang:
		s.wait(time.Time{}, ctx, nil)
		landLate("on a call stuck in the network")
		return fmt.Errorf("idemsim: %s: %w", what, ctx.Err())
	}
	err := apply(ctx)
	switch pl.fault {
	case faultFailAfter:
		s.sleepCtx(ctx, pl.post)
		return errInjected
	case faultHangAfter:
		s.wait(time.Time{}, ctx, nil)
		return fmt.Errorf("idemsim: %s: %w", what, ctx.Err())
	}
	if !s.sleepCtx(ctx, pl.post) {
		return fmt.Errorf("idemsim: %s: %w", what, ctx.Err())
	}
	return err
}

// fromRequest returns the request or the job's delivery the running proc
// serves, if it serves one, and notes its store call: a request with a
// malformed key must make none.
func (f *faultStore) fromRequest(op string) *attempt {
	att, _ := f.w.s.cur.tag.(*attempt)
	if att != nil && att.badKey != "" {
		f.w.violate(invPolicy, "%s (%s) reaches the store (%s): a request with a malformed key must record nothing", att.name, att.what, op)
	}
	return att
}

// Acquire implements idem.Store.
func (f *faultStore) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	m := f.w.m
	att := f.fromRequest("Acquire")
	if att != nil {
		att.token = a.Token
		m.checkFingerprint(att, a.Fingerprint)
		if a.ID != att.id {
			f.w.violate(invPolicy, "%s (%s) takes %s, not its own record %s", att.name, att.what, idName(a.ID), idName(att.id))
		}
		m.checkKeySpace(att, a.ID)
	}
	m.newToken(a.Token, f.n, a.ID, att)
	m.leaseAsked(a.Token, a.LeaseUntil)
	m.checkAcquireAsked(f.n, a)
	var (
		rec idem.Record
		out idem.AcquireOutcome
		err error
	)
	apply := func(ctx context.Context) error {
		rec, out, err = f.w.store.Acquire(ctx, a)
		m.observeAcquire(f.n, a, rec, out, err)
		return err
	}
	ghost := func() {
		r, o, e := f.w.store.Acquire(context.Background(), a)
		m.observeAcquire(f.n, a, r, o, e)
	}
	start := f.w.s.now
	e := f.call(ctx, "acquire "+idName(a.ID)+" "+m.label(a.Token), apply, ghost)
	m.lease(a.Token).slowAcquire = e != nil || f.w.s.now.Sub(start) > f.w.p.renewEvery/8
	m.answered(f.n, a.Token, e == nil && err == nil && out != idem.AcquireExisting, a.LeaseUntil, false)
	if e != nil {
		return idem.Record{}, 0, e
	}
	if att != nil && err == nil {
		att.acquired = &acquired{rec: rec, out: out}
	}
	return rec, out, err
}

// Renew implements idem.Store.
func (f *faultStore) Renew(ctx context.Context, id idem.ID, token string, until time.Time) error {
	m := f.w.m
	m.checkRetried(f.n, token, "a renewal")
	m.leaseAsked(token, until)
	m.checkRenewAsked(f.n, id, token, until)
	apply := func(ctx context.Context) error {
		err := f.w.store.Renew(ctx, id, token, until)
		m.observeRenew(id, token, until, err)
		return err
	}
	ghost := func() {
		m.observeRenew(id, token, until, f.w.store.Renew(context.Background(), id, token, until))
	}
	ended := m.renewalCall(f.n)
	err := f.call(ctx, "renew "+idName(id)+" "+m.label(token), apply, ghost)
	ended(err)
	if err != nil && !errors.Is(err, idem.ErrLockLost) {
		m.renewalFailed(f.n, token)
	}
	m.answered(f.n, token, err == nil, until, errors.Is(err, idem.ErrLockLost))
	return err
}

// RenewBatch implements idem.BatchRenewer. During the chaos, a batch
// sometimes fails in part, as on a store spread over nodes one of which
// failed: the leases of that node (drawn) are not renewed, or are and the
// answer is lost, and the call returns an idem.PartialRenewal naming them,
// with the others' outcomes as the store gave them.
func (f batchFaultStore) RenewBatch(ctx context.Context, held []idem.Held, until time.Time, lost []bool) error {
	w, m := f.w, f.w.m
	what := "renew batch"
	for _, h := range held {
		m.checkRetried(f.n, h.Token, "a batch renewal")
		m.leaseAsked(h.Token, until)
		m.checkRenewAsked(f.n, h.ID, h.Token, until)
		what += " " + m.label(h.Token)
	}
	br := w.store.(idem.BatchRenewer)
	sick, sickLands := w.planPartial(len(held))
	if sick != nil {
		what += " (one node fails:"
		for i, h := range held {
			if sick[i] {
				what += " " + m.label(h.Token)
			}
		}
		what += ")"
	}
	// renew renews the leases of held whose sick entry is want, as one
	// call of the store's, and records their outcomes in lost.
	renew := func(ctx context.Context, want bool, lost []bool) error {
		var part []idem.Held
		var at []int
		for i, h := range held {
			if sick == nil || sick[i] == want {
				part, at = append(part, h), append(at, i)
			}
		}
		if len(part) == 0 {
			return nil
		}
		partLost := make([]bool, len(part))
		err := br.RenewBatch(ctx, part, until, partLost)
		m.observeRenewBatch(part, until, partLost, err)
		for j, i := range at {
			lost[i] = partLost[j]
		}
		return err
	}
	apply := func(ctx context.Context) error {
		if err := renew(ctx, false, lost); err != nil || sick == nil {
			return err
		}
		if sickLands {
			_ = renew(ctx, true, make([]bool, len(held)))
		}
		return partialRenewal{sick: sick}
	}
	held2 := slices.Clone(held)
	ghost := func() {
		lost := make([]bool, len(held2))
		m.observeRenewBatch(held2, until, lost, br.RenewBatch(context.Background(), held2, until, lost))
	}
	ended := m.renewalCall(f.n)
	err := f.call(ctx, what, apply, ghost)
	ended(err)
	var partial idem.PartialRenewal
	isPartial := errors.As(err, &partial)
	for i, h := range held {
		ok := err == nil || isPartial && !partial.Unrenewed(i)
		if !ok && !errors.Is(err, idem.ErrLockLost) {
			m.renewalFailed(f.n, h.Token)
		}
		m.answered(f.n, h.Token, ok && !lost[i], until, ok && lost[i])
	}
	return err
}

// Complete implements idem.Store.
func (f *faultStore) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	m := f.w.m
	f.fromRequest("Complete")
	m.checkRetried(f.n, token, "its completion")
	m.checkCompleteAsked(f.n, id, token, c)
	if t := m.tokens[token]; t != nil {
		t.recorded = true
	}
	if x := m.execOf[token]; x != nil && x.att.msg != nil {
		m.checkJobStored(x, c)
	} else {
		m.checkStored(token, c)
	}
	apply := func(ctx context.Context) error {
		err := f.w.store.Complete(ctx, id, token, c)
		m.observeComplete(id, token, c, err)
		return err
	}
	var ghost func()
	if f.w.effects != nil {
		// The completion commits the request's transaction: whatever
		// keeps it from answering leaves that work rolled back (or in
		// doubt), which the store says with idem.ErrRolledBack. No ghost:
		// the commit goes down the transaction's own connection.
		err := f.call(ctx, "complete "+idName(id)+" "+m.label(token), apply, nil)
		if err != nil && !errors.Is(err, idem.ErrRolledBack) && !errors.Is(err, idem.ErrLockLost) {
			err = fmt.Errorf("%w: %w", idem.ErrRolledBack, err)
		}
		m.completionAnswered(token, err)
		return err
	}
	if f.w.remote {
		// The Engine reuses the response's memory once Complete returns;
		// a call that lands later carries its own copy, as the bytes sent
		// over a network would be.
		c2 := c
		c2.Response = cloneResponse(c.Response)
		ghost = func() {
			m.observeComplete(id, token, c2, f.w.store.Complete(context.Background(), id, token, c2))
		}
	}
	err := f.call(ctx, "complete "+idName(id)+" "+m.label(token), apply, ghost)
	m.completionAnswered(token, err)
	return err
}

// Release implements idem.Store.
func (f *faultStore) Release(ctx context.Context, id idem.ID, token string) error {
	m := f.w.m
	f.fromRequest("Release")
	m.checkRetried(f.n, token, "its release")
	// A release after a completion that failed is the Engine's cleanup,
	// whose answer it ignores; any other ends the lock, and its answer
	// decides what the Engine does with the response (see
	// completionAnswered).
	ends := true
	if t := m.tokens[token]; t != nil {
		t.released = true
		ends = !t.recorded
	}
	apply := func(ctx context.Context) error {
		err := f.w.store.Release(ctx, id, token)
		m.observeRelease(id, token, err)
		return err
	}
	ghost := func() {
		m.observeRelease(id, token, f.w.store.Release(context.Background(), id, token))
	}
	err := f.call(ctx, "release "+idName(id)+" "+m.label(token), apply, ghost)
	if f.w.effects != nil && err != nil && !errors.Is(err, idem.ErrRolledBack) {
		// The request's transaction is rolled back whatever keeps the
		// release from answering (the store rolls it back before its
		// DELETE; the slot's cleanup, if the call never got there): the
		// store says so with idem.ErrRolledBack.
		err = fmt.Errorf("%w: %w", idem.ErrRolledBack, err)
	}
	if ends {
		m.completionAnswered(token, err)
	}
	return err
}

// Get implements idem.Store. The Engine does not call it.
func (f *faultStore) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	var (
		rec idem.Record
		err error
	)
	apply := func(ctx context.Context) error {
		rec, err = f.w.store.Get(ctx, id)
		f.w.m.observeGet(id, rec, err)
		return err
	}
	if e := f.call(ctx, "get "+idName(id), apply, nil); e != nil && !errors.Is(e, idem.ErrNotFound) {
		return idem.Record{}, e
	}
	return rec, err
}

// Purge implements idem.Store. The Engine does not call it; the world's
// purger calls the store directly.
func (f *faultStore) Purge(ctx context.Context, now time.Time, limit int) (int, error) {
	var (
		n   int
		err error
	)
	apply := func(ctx context.Context) error {
		n, err = f.w.store.Purge(ctx, now, limit)
		f.w.m.observePurge(now, limit, n, err)
		return err
	}
	if e := f.call(ctx, "purge", apply, nil); e != nil {
		return 0, e
	}
	return n, err
}

func ms(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}
