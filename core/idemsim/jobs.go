package idemsim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// Jobs are work that is not an HTTP request, run with Engine.Do: a queue
// delivers each message at least once to a consumer in one of the engine
// processes, which runs it with Do and acknowledges it once Do ends with
// a definitive outcome (a result, a permanent failure, or ErrKeyReused).
// Everything else is redelivered: ErrInProgress, a failure, a panic, a
// store error, a delivery the consumer did not finish within the queue's
// visibility timeout (some consumers give the job that deadline too), or
// one whose process crashed. During the chaos the queue also hands a
// message to a second consumer at once, producers publish a message twice
// or another one under its key, and a message done is sometimes delivered
// once more, as its acknowledgement was lost. The jobs work in spells, for
// up to three leases, and return a result that names their run, or fail,
// permanently or not, or panic.

// jobNames are the operations jobs are named for ("" too: Do takes any).
var jobNames = [...]string{"settle-charge", "settle-refund", "payout.paid", ""}

// errJobPanic is what a simulated job panics with.
var errJobPanic = errors.New("idemsim: the job panicked")

// errDeadline is the cause a consumer's own deadline cancels its delivery's
// context with.
var errDeadline = errors.New("idemsim: the consumer's deadline passed")

// errNotRun is a job's error when the simulation itself could not run it
// (a violation is reported first).
var errNotRun = errors.New("idemsim: the job could not run")

// jobFate is how a job's run ends.
type jobFate uint8

const (
	fateNone      jobFate = iota // not a job, still running, or stopped by its process's crash
	fateResult                   // returns a result
	fateFailed                   // returns an error it does not mark permanent
	fatePermanent                // returns an error marked with idem.Permanent
	fatePanicked
)

var fateNames = [...]string{"has not returned", "returned a result", "failed", "failed permanently", "panicked"}

// jobPlan is what one run of a job does.
type jobPlan struct {
	work  []time.Duration
	react time.Duration
	deaf  bool
	fate  jobFate
	size  int // of the result
}

// newJobMsg draws job i's message: an event in JSON, other bytes, none, or
// many.
func newJobMsg(r *rand.Rand, i int) *jobMsg {
	m := &jobMsg{name: jobNames[r.IntN(len(jobNames))]}
	switch x := r.Float64(); {
	case x < 0.6:
		m.payload = fmt.Appendf(nil, `{"id":"evt_%d","type":"charge.settled","amount":%d}`, i, 100+r.IntN(10000))
	case x < 0.8:
		m.payload = make([]byte, r.IntN(2048))
		for k := range m.payload {
			m.payload[k] = byte(r.IntN(256))
		}
	case x < 0.9:
	default:
		m.payload = bytes.Repeat(fmt.Appendf(nil, "evt_%d;", i), 1+r.IntN(2000))
	}
	return m
}

// deliver returns the message as one delivery carries it: a copy of it
// (an empty payload given as nil or as no bytes), or, for a producer's
// mistake, another job under its key.
func (m *jobMsg) deliver(r *rand.Rand, deviant bool) (*jobMsg, string) {
	d := &jobMsg{name: m.name, payload: bytes.Clone(m.payload)}
	if len(d.payload) == 0 && r.IntN(2) == 0 {
		d.payload = []byte{}
	}
	if !deviant {
		return d, fmt.Sprintf("%d bytes", len(d.payload))
	}
	n := len(d.payload)
	switch {
	case r.IntN(4) == 0:
		d.name = strings.ToUpper(d.name) + "-v2"
		return d, "another name, " + fmt.Sprintf("%d bytes", n)
	case n == 0:
		d.payload = []byte{0}
		return d, "a payload of one byte, not none"
	case r.IntN(3) == 0:
		d.payload = d.payload[:n-1]
		return d, fmt.Sprintf("a byte less (%d bytes)", n-1)
	case r.IntN(2) == 0:
		d.payload = append(d.payload, d.payload[n-1])
		return d, fmt.Sprintf("a byte more (%d bytes)", n+1)
	}
	d.payload[r.IntN(n)] ^= byte(1 + r.IntN(255))
	return d, fmt.Sprintf("one byte changed (%d bytes)", n)
}

// planJobs draws the messages: most under keys of their own, some
// published twice, some under a key another job or a request uses (a
// producer's mistake, or two producers that chose one id).
func (w *world) planJobs() {
	r, p := w.rng, &w.p
	first := len(w.reqs)
	for i := range p.jobs {
		lr := &logical{name: fmt.Sprintf("q%d", i)}
		switch x := r.Float64(); {
		case i > 0 && x < 0.2:
			o := w.reqs[first+r.IntN(i)]
			lr.id, lr.msg = o.id, o.msg
		case x < 0.3:
			o := w.reqs[r.IntN(len(w.reqs))]
			lr.id, lr.msg = o.id, newJobMsg(r, i)
		default:
			lr.id = idem.ID{Scope: scopes[p.scopeSet[r.IntN(p.scopes)]], Key: p.jobKeys[i]}
			lr.msg = newJobMsg(r, i)
		}
		w.schedule(lr)
	}
}

// planCrowd plans the crowd, if the world has one (params.crowd): jobs
// under keys of their own, more than one RenewBatch call renews, delivered
// at one instant to one engine (one that renews in batches, if any), once
// the store has been healthy for two leases, so that no renewal slow or
// failed during the chaos can excuse a lease lost. Each works for longer
// than a lease, so that all their leases are renewed together, several
// times, and each is judged as every job is: on a healthy store, an
// Engine that leaves one lease of a batch unrenewed tells its job the
// lease ran out, which invariant 5 does not allow (model.checkLeaseLost).
func (w *world) planCrowd() {
	p := &w.p
	if p.crowd == 0 {
		return
	}
	w.crowdAt = w.calmAt.Add(2 * p.lease)
	patient := 2*p.lease + p.renewEvery + 3*p.storeTimeout + 10*time.Second
	for i := range p.crowd {
		w.reqs = append(w.reqs, &logical{
			name:    fmt.Sprintf("m%d", i),
			id:      idem.ID{Scope: scopes[p.scopeSet[0]], Key: fmt.Sprintf("crowd_%d", i)},
			msg:     newJobMsg(w.rng, p.jobs+i),
			start:   w.crowdAt,
			patient: patient,
			crowd:   true,
		})
	}
	if end := w.crowdAt.Add(patient + 2*p.lease + time.Minute); end.After(w.deadline) {
		w.deadline = end
	}
}

// crowdEngine is the engine the crowd arrives at: one that renews in
// batches, if any does.
func (w *world) crowdEngine() *slot {
	if w.crowdSlot == nil {
		var up, batching []*slot
		for _, sl := range w.slots {
			if sl.node != nil {
				up = append(up, sl)
				if sl.node.batch {
					batching = append(batching, sl)
				}
			}
		}
		if len(batching) > 0 {
			up = batching
		}
		w.crowdSlot = up[w.rng.IntN(len(up))]
		w.tracef("a crowd of %d jobs arrives at %s", w.p.crowd, w.crowdSlot.name())
	}
	return w.crowdSlot
}

// newDelivery makes the next delivery of lr.
func (w *world) newDelivery(lr *logical, deviant bool) *attempt {
	lr.sent++
	w.deliveries++
	// The job's record is under its JobID, apart from the requests' keys.
	a := &attempt{name: fmt.Sprintf("%s.%d", lr.name, lr.sent), idx: -1, lr: lr, id: idem.JobID(lr.id.Scope, lr.id.Key), deviant: deviant}
	a.msg, a.what = lr.msg.deliver(w.rng, deviant)
	return a
}

// delivery is one delivery of a job to a consumer, and what came of it.
type delivery struct {
	att      *attempt
	ctx      context.Context
	cancel   context.CancelCauseFunc
	refused  string // why no consumer took it
	done     bool   // Do returned, or the job's panic came through it
	died     bool   // the consumer's process crashed first
	result   []byte
	err      error
	panicked bool
}

func (dv *delivery) String() string {
	switch {
	case dv.refused != "":
		return dv.refused
	case dv.died:
		return "lost: its consumer crashed"
	case !dv.done:
		return "no acknowledgement in time"
	case dv.panicked:
		return "panic"
	case dv.err == nil:
		return fmt.Sprintf("result, %d bytes", len(dv.result))
	}
	return "error: " + dv.err.Error()
}

// definitive: an outcome the consumer acknowledges, not one it has
// redelivered.
func (dv *delivery) definitive() bool {
	var perm *idem.PermanentError
	return dv.done && !dv.died && !dv.panicked &&
		(dv.err == nil || errors.As(dv.err, &perm) || errors.Is(dv.err, idem.ErrKeyReused))
}

// consume is the queue for one message: it delivers lr until a delivery
// ends with a definitive outcome.
func (w *world) consume(lr *logical) {
	s, r, p := w.s, w.rng, &w.p
	defer func() { lr.finished = true }()
	s.wait(lr.start, nil, nil)
	var aim *aimed
	for s.now.Before(w.deadline) {
		calm := !s.now.Before(w.calmAt)
		if !calm && r.Float64() < p.pDuplicate {
			w.dispatch(w.newDelivery(lr, false), w.slots[r.IntN(len(w.slots))], msBetween(r, 0, 10*time.Millisecond), 0, false)
		}
		att := w.newDelivery(lr, !calm && r.Float64() < p.pOtherJob)
		timeout, deadline := lr.patient, r.Float64() < p.pDeadline
		if !calm && r.Float64() < p.pShortTimeout {
			timeout = msBetween(r, 200*time.Millisecond, 10*time.Second)
		}
		sl, travel := w.route(aim)
		aim = nil
		if lr.crowd && lr.tries == 0 {
			// All at one instant: their leases are all due at one pass.
			sl, travel = w.crowdEngine(), 0
		}
		dv := w.dispatch(att, sl, travel, timeout, deadline)
		lr.tries++
		lr.last = dv.String()
		if dv.definitive() && !att.deviant {
			lr.done = true
			w.tracef("%s is done", lr.name)
			break
		}
		var pause time.Duration
		pause, aim = w.retryAfter(lr, msBetween(r, 100*time.Millisecond, 3*time.Second))
		s.sleep(pause)
	}
	if lr.done && !lr.crowd && r.Float64() < p.pLostAck {
		s.sleep(msBetween(r, 0, 2*p.lease))
		if s.now.Before(w.deadline) {
			w.tracef("%s: its acknowledgement was lost", lr.name)
			w.dispatch(w.newDelivery(lr, false), w.slots[r.IntN(len(w.slots))], msBetween(r, 0, 10*time.Millisecond), lr.patient, false)
		}
	}
}

// dispatch hands att to a consumer in slot sl's process, which gets it
// after travel, and waits up to timeout (the visibility timeout) for its
// outcome; a timeout of 0 waits for nothing (a duplicate delivery). With
// deadline, the consumer's context for the job ends at the timeout too.
func (w *world) dispatch(att *attempt, sl *slot, travel, timeout time.Duration, deadline bool) *delivery {
	s := w.s
	dv := &delivery{att: att}
	how := "a duplicate"
	if timeout > 0 {
		how = "visibility timeout " + ms(timeout)
		if deadline {
			how += ", the job's deadline too"
		}
	}
	w.tracef("%s → %s: job %q %s, %s, %s", att.name, sl.name(), att.msg.name, idName(att.id), att.what, how)
	n := sl.node
	if n == nil {
		s.sleep(msBetween(w.rng, 0, 10*time.Millisecond))
		dv.refused = "refused: " + sl.name() + " is down"
		return dv
	}
	dv.ctx, dv.cancel = context.WithCancelCause(context.Background())
	p := s.spawn(n, n.name()+" "+att.name, func() { w.consumer(n, dv, travel) })
	p.tag = att
	if timeout == 0 {
		return dv
	}
	s.wait(s.now.Add(timeout), nil, func() bool { return dv.done && !dv.died })
	if !dv.done || dv.died {
		if deadline {
			dv.cancel(errDeadline)
		}
		w.tracef("%s ← %s", att.name, dv)
	}
	return dv
}

// consumer is the consumer's side of a delivery, in engine process n: it
// runs the job with Do and judges what came of it.
func (w *world) consumer(n *node, dv *delivery, travel time.Duration) {
	ok := false
	defer func() {
		dv.done = true
		dv.died = !ok && n.dead
		if t := w.m.tokens[dv.att.token]; t != nil {
			t.ended = true
		}
	}()
	w.s.sleep(travel)
	if fx := w.effects; fx != nil && fx.Wrap != nil {
		req, err := http.NewRequestWithContext(dv.ctx, http.MethodPost, "/jobs", nil)
		if err != nil {
			panic(err)
		}
		run := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { w.do(n, r.Context(), dv) })
		fx.Wrap(run).ServeHTTP(&respWriter{h: http.Header{}, cut: -1, declared: -1}, req)
	} else {
		w.do(n, dv.ctx, dv)
	}
	ok, dv.done = true, true
	w.tracef("%s ← %s", dv.att.name, dv)
	w.m.checkDelivery(dv)
}

// do runs the delivery's job with Do, and takes the job's panic, which Do
// lets go on, as the consumer's recovery would.
func (w *world) do(n *node, ctx context.Context, dv *delivery) {
	defer func() {
		if r := recover(); r != nil {
			if r != errJobPanic {
				panic(r)
			}
			dv.panicked = true
		}
	}()
	att := dv.att
	job := idem.Job{Scope: att.lr.id.Scope, Key: att.lr.id.Key, Name: att.msg.name, Payload: att.msg.payload}
	dv.result, dv.err = n.engine.Do(ctx, job, func(ctx context.Context) ([]byte, error) {
		return w.runJob(n, dv, ctx)
	})
}

// runJob is the job's function: it does its work in spells, stopping when
// its context is cancelled (within plan.react), writes its business work
// (Effects), then returns a result naming its run, or fails, permanently
// or not, or panics.
func (w *world) runJob(n *node, dv *delivery, ctx context.Context) ([]byte, error) {
	att := dv.att
	held, ok := idem.HeldKey(ctx)
	if !ok {
		w.violate(invOneAtATime, "%s: the job runs without holding its key", att.name)
		return nil, errNotRun
	}
	w.m.checkJobStart(att, held)
	x := w.m.startExec(idem.JobID(held.ID.Scope, held.ID.Key), held.Token, n, att)
	pl := w.planJob(att.lr.crowd)
	what := fateNames[pl.fate]
	if pl.fate == fateResult {
		what += fmt.Sprintf(" of %d bytes", pl.size)
	}
	w.tracef("X%d starts for %s as %s: %s of work, then it %s", x.n, idName(x.id), w.m.label(held.Token), ms(sum(pl.work)), what)
	if !w.spells(ctx, x, pl.work, pl.react, pl.deaf) {
		cause := context.Cause(ctx)
		w.m.checkCause(x, dv.ctx, cause)
		return w.m.jobEnds(x, fateFailed, fmt.Errorf("job X%d stopped: %w", x.n, cause))
	}
	if !w.writeWork(ctx, x, "the job's work", "the job's transaction") {
		return nil, errNotRun
	}
	switch pl.fate {
	case fatePanicked:
		x.fate = fatePanicked
		w.m.endExec(x, "panicked")
		panic(errJobPanic)
	case fateFailed:
		return w.m.jobEnds(x, fateFailed, fmt.Errorf("job X%d: the provider is unavailable", x.n))
	case fatePermanent:
		own := fmt.Errorf("job X%d: the charge was declined", x.n)
		x.msg = own.Error()
		return w.m.jobEnds(x, fatePermanent, idem.Permanent(own))
	}
	if pl.size > 0 {
		x.result = handlerBody(x, pl.size)
	}
	return w.m.jobEnds(x, fateResult, nil)
}

// planJob draws what one run of a job does. Once the chaos is over, a job
// neither fails (unless permanently) nor panics, nor ignores its context.
// A job of the crowd works for a lease to a lease and a renewal interval,
// in one spell.
func (w *world) planJob(crowd bool) jobPlan {
	r, p := w.rng, &w.p
	calm := !w.s.now.Before(w.calmAt)
	pl := jobPlan{fate: fateResult}
	pl.work, pl.react = w.planWork(calm)
	if crowd {
		pl.work = []time.Duration{msBetween(r, p.lease, p.lease+p.renewEvery)}
	}
	switch x := r.Float64(); {
	case x < p.pPermanent:
		pl.fate = fatePermanent
	case calm:
	case x < p.pPermanent+p.pJobFail:
		pl.fate = fateFailed
	case x < p.pPermanent+p.pJobFail+p.pJobPanic:
		pl.fate = fatePanicked
	}
	pl.deaf = !calm && r.Float64() < p.pDeaf
	switch x := r.Float64(); {
	case x < 0.05:
		pl.size = 0
	case x < 0.7:
		pl.size = 1 + r.IntN(2000)
	case x < 0.95:
		pl.size = 2000 + r.IntN(p.maxBody-2000)
	default:
		pl.size = p.maxBody + 1 + r.IntN(4096) // too large to record
	}
	return pl
}
