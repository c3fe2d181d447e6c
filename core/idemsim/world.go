package idemsim

import (
	"context"
	"fmt"
	"hash"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/idemhttp"
)

// epoch is where virtual time starts: a fixed instant in whole seconds, so
// that every time of a run is the same from one run to the next.
var epoch = time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC)

// world is one simulated run: engines sharing one store, clients, faults,
// and the model the invariants are checked on.
type world struct {
	seed    uint64
	p       params
	s       *sched
	rng     *rand.Rand // every draw made while the run goes, in the order procs run
	store   idem.Store // the store under test
	batch   bool
	remote  bool
	effects *Effects
	m       *model

	slots      []*slot
	reqs       []*logical // the requests, then the jobs
	attempts   []*attempt // requests sent
	deliveries int        // deliveries of jobs
	calmAt     time.Time  // no more faults, crashes or misbehaving clients from here
	crowdAt    time.Time  // the crowd arrives (see planCrowd)
	crowdSlot  *slot      // at this engine, chosen when it arrives
	deadline   time.Time  // every logical request must have its answer by then
	idleAt     time.Time  // when the run ended, before the final checks move time on

	failure *Failure
	trace   tracer
}

// slot is one engine instance behind the load balancer; a crash ends its
// process (node), a restart starts a new one.
type slot struct {
	idx  int
	gen  int
	node *node // nil while down
}

// node is one engine process.
type node struct {
	slot, gen   int
	dead        bool
	pausedUntil time.Time     // frozen until then (a GC pause, a stopped VM)
	skew        time.Duration // its clock's error
	engine      *idem.Engine
	h           http.Handler
	batch       bool // its Engine renews in batches (idem.BatchRenewer)

	// Its renewal calls that did not answer promptly, for
	// model.checkLeaseLost: when the last of them ended, and when those
	// under way started.
	slowRenewal time.Time
	renewals    []time.Time
	// workersBusy: the last time renewWorkers of its renewal calls were
	// under way at once (see model.workersHeld).
	workersBusy time.Time
}

func (n *node) isDead() bool { return n != nil && n.dead }

func (n *node) name() string {
	if n == nil {
		return "world"
	}
	return fmt.Sprintf("e%d.%d", n.slot, n.gen)
}

var discard = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError + 1}))

func newWorld(seed uint64, store idem.Store, remote, contract bool) *world {
	w := &world{
		seed:   seed,
		p:      drawParams(seed),
		s:      newSched(seed, epoch),
		rng:    rand.New(rand.NewPCG(seed, 0x3011d)),
		store:  store,
		remote: remote,
	}
	_, w.batch = store.(idem.BatchRenewer)
	if !w.batch {
		// The crowd is there for the batches; lease by lease, it would
		// only make the seed slow.
		w.p.crowd = 0
	}
	w.m = newModel(w, contract)
	w.trace.hash = fnv.New64a()
	w.calmAt = epoch.Add(w.p.chaos)
	// After the chaos, a key is free within a lease, a handler that runs
	// ends within maxHandler, and a client retries within seconds: this
	// bound is generous, but finite.
	w.deadline = w.calmAt.Add(2*(w.p.lease+w.p.maxHandler+w.p.storeTimeout) + time.Minute)
	w.s.stopped = func() bool { return w.failure != nil }
	return w
}

// at formats t as the time since the run began.
func (w *world) at(t time.Time) string {
	ms := t.Sub(epoch).Round(time.Millisecond).Milliseconds()
	sign := "+"
	if ms < 0 {
		sign, ms = "-", -ms
	}
	frac := strconv.FormatInt(ms%1000, 10)
	return sign + strconv.FormatInt(ms/1000, 10) + "." + strings.Repeat("0", 3-len(frac)) + frac + "s"
}

// tracer keeps the last lines of the run's trace, and a hash of all of
// them (two runs of one seed must hash alike).
type tracer struct {
	ring  [80]string
	n     int
	hash  hash.Hash64
	lines int
	all   io.Writer // every line, if set
}

func (w *world) tracef(format string, args ...any) {
	who := "world"
	if p := w.s.cur; p != nil {
		who = p.name
	}
	line := fmt.Sprintf("%-10s step %-6d %-18s %s", w.at(w.s.now), w.s.steps+1, who, fmt.Sprintf(format, args...))
	t := &w.trace
	t.ring[t.n%len(t.ring)] = line
	t.n++
	t.lines++
	io.WriteString(t.hash, line)
	t.hash.Write([]byte{'\n'})
	if t.all != nil {
		fmt.Fprintln(t.all, line)
	}
}

func (t *tracer) last(n int) []string {
	n = min(n, t.n, len(t.ring))
	out := make([]string, 0, n)
	for i := t.n - n; i < t.n; i++ {
		out = append(out, t.ring[i%len(t.ring)])
	}
	return out
}

// violate records the first invariant violation of the run, which then
// stops.
func (w *world) violate(inv int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.tracef("VIOLATION of invariant %s: %s", invNames[inv], msg)
	if w.failure != nil {
		return
	}
	w.failure = &Failure{
		Seed:      w.seed,
		Step:      w.s.steps + 1,
		At:        w.s.now.Sub(epoch),
		Invariant: invNames[inv],
		Message:   msg,
		Params:    w.p.String(),
	}
}

// run simulates the whole world and returns the first violation, if any.
func (w *world) run() *Failure {
	s := w.s
	w.tracef("seed %d: %s", w.seed, w.p)
	w.slots = make([]*slot, w.p.engines)
	for i := range w.slots {
		w.slots[i] = &slot{idx: i}
		w.startNode(w.slots[i])
	}
	w.planRequests()
	w.planJobs()
	w.planCrowd()
	for _, lr := range w.reqs {
		if lr.msg != nil {
			s.spawn(nil, lr.name, func() { w.consume(lr) })
			continue
		}
		s.spawn(nil, lr.name, func() { w.client(lr) })
	}
	s.spawn(nil, "director", w.direct)
	s.spawn(nil, "judge", w.judge)
	if w.p.pauses > 0 {
		s.spawn(nil, "pauser", w.pauser)
	}
	if w.p.forgets > 0 {
		s.spawn(nil, "operator", w.operator)
	}
	if w.p.ttl < time.Hour {
		s.spawn(nil, "purger", w.purger)
	}
	limit := w.deadline.Add(4*w.p.lease + w.p.maxHandler + 4*w.p.storeTimeout)
	idle := s.run(limit)
	w.idleAt = s.now
	if len(s.panics) > 0 && w.failure == nil {
		w.violate(invPanic, "%s", s.panics[0])
	}
	if w.failure == nil && !idle {
		var left []string
		for _, p := range s.procs {
			left = append(left, p.name)
		}
		w.violate(invClean, "at %s, long after every client was done, %d goroutines still run (%s) and %d timers are pending",
			w.at(s.now), len(left), strings.Join(left, ", "), len(s.timers))
	}
	if w.failure == nil {
		w.finalChecks()
	}
	if w.failure != nil {
		w.failure.Trace = w.trace.last(40)
	}
	s.abort()
	return w.failure
}

func (w *world) startNode(sl *slot) {
	n := &node{slot: sl.idx, gen: sl.gen}
	if w.p.skewMax > 0 {
		n.skew = msBetween(w.rng, -w.p.skewMax, w.p.skewMax)
	}
	sl.gen++
	fs := &faultStore{w: w, n: n}
	var st idem.Store = fs
	single := w.batch && w.rng.Float64() < w.p.pSingleRenew
	if w.batch && !single {
		st = batchFaultStore{fs}
		n.batch = true
	}
	n.engine = idem.New(idem.Config{
		Store:           st,
		Lease:           w.p.lease,
		RenewEvery:      w.p.renewEvery,
		StoreTimeout:    w.p.storeTimeout,
		HandlerTimeout:  w.p.handlerTimeout,
		TTL:             w.p.ttl,
		MaxResponseBody: w.p.maxBody,
		ReplayHeaders:   extraReplayHeaders,
		Clock:           clock{w.s, n},
		Logger:          discard,
		OnEvent: func(_ context.Context, ev idemevent.Event) {
			switch ev.Kind {
			case idemevent.First, idemevent.Replay, idemevent.Conflict, idemevent.Mismatch, idemevent.Stored:
				return // the client's and the store's lines say as much
			}
			line := ev.Kind.String()
			if ev.Reason != "" {
				line += " (" + string(ev.Reason) + ")"
			}
			if ev.Err != nil {
				line += ": " + ev.Err.Error()
			}
			w.tracef("event %s", line)
		},
	})
	// The tenant comes from authentication, which the simulation plays:
	// the attempt says who sent it.
	scope := idemhttp.WithScope(func(r *http.Request) string { return w.attemptOf(r).id.Scope })
	n.h = idemhttp.Middleware(n.engine, scope)(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.handle(n, rw, r)
	}))
	if w.effects != nil && w.effects.Wrap != nil {
		n.h = w.effects.Wrap(n.h)
	}
	sl.node = n
	how := ""
	if single {
		how = ", renewing lease by lease on a store that renews in batches"
	}
	w.tracef("%s starts, its clock off by %s%s", n.name(), n.skew, how)
}

// crash ends sl's process: its handlers stop, its store calls never land,
// its timers never fire, its locks are left to their leases.
func (w *world) crash(sl *slot) {
	n := sl.node
	n.dead = true
	sl.node = nil
	w.s.kill(n)
	w.tracef("%s crashes", n.name())
	w.m.crash(n)
	// Invariant 4: every key it held is free again within a lease plus
	// the renewal interval.
	by := w.s.now.Add(w.p.lease + w.p.renewEvery)
	for _, tok := range w.m.order {
		t := w.m.tokens[tok]
		if t.node != n || t.ended {
			continue
		}
		w.s.spawn(nil, "probe "+t.label, func() {
			w.s.wait(by, nil, nil)
			rec, err := w.store.Get(context.Background(), t.id)
			w.m.observeGet(t.id, rec, err)
			if err == nil && rec.State == idem.InFlight && rec.Token == tok && rec.LeaseUntil.After(w.s.now) {
				w.violate(invFreed, "%s still holds %s at %s, a lease and a renewal interval after %s crashed (lease to %s)",
					t.label, idName(t.id), w.at(w.s.now), n.name(), w.at(rec.LeaseUntil))
			}
		})
	}
}

// direct crashes and restarts engines during the chaos, and brings every
// engine up for the calm that follows.
func (w *world) direct() {
	s := w.s
	var times []time.Duration
	for range w.p.crashes {
		times = append(times, msBetween(w.rng, 0, w.p.chaos))
	}
	sortDurations(times)
	for _, t := range times {
		s.wait(epoch.Add(t), nil, nil)
		var up []*slot
		for _, sl := range w.slots {
			if sl.node != nil {
				up = append(up, sl)
			}
		}
		if len(up) == 0 {
			continue
		}
		sl := up[w.rng.IntN(len(up))]
		w.crash(sl)
		down := msBetween(w.rng, 0, 2*w.p.lease)
		s.spawn(nil, fmt.Sprintf("restart e%d", sl.idx), func() {
			s.wait(minTime(s.now.Add(down), w.calmAt), nil, nil)
			if sl.node == nil {
				w.startNode(sl)
			}
		})
	}
	s.wait(w.calmAt, nil, nil)
	w.tracef("the chaos ends: no more faults, crashes or misbehaving clients")
}

// pauser freezes engine processes now and then during the chaos, as a
// long garbage-collection pause or a stopped virtual machine would: their
// handlers, renewals and timers stand still, then go on where they were.
func (w *world) pauser() {
	s := w.s
	var times []time.Duration
	for range w.p.pauses {
		times = append(times, msBetween(w.rng, 0, w.p.chaos))
	}
	sortDurations(times)
	for _, t := range times {
		s.wait(epoch.Add(t), nil, nil)
		sl := w.slots[w.rng.IntN(len(w.slots))]
		n := sl.node
		if n == nil || !s.now.Before(w.calmAt) {
			continue
		}
		d := msBetween(w.rng, time.Second, 2*w.p.lease)
		n.pausedUntil = minTime(s.now.Add(d), w.calmAt)
		w.tracef("%s freezes for %s", n.name(), n.pausedUntil.Sub(s.now))
		w.m.pause(n)
		s.wait(n.pausedUntil, nil, nil)
		w.tracef("%s thaws", n.name())
	}
}

// judge checks invariant 5 at the deadline, for requests and jobs alike.
func (w *world) judge() {
	answered := func() bool {
		for _, lr := range w.reqs {
			if !lr.done {
				return false
			}
		}
		return true
	}
	w.s.wait(w.deadline, nil, answered)
	if answered() {
		return
	}
	var open []string
	for _, lr := range w.reqs {
		if !lr.done {
			open = append(open, fmt.Sprintf("%s (%s, %d attempts, last: %s)", lr.name, idName(lr.id), lr.tries, lr.last))
		}
	}
	w.violate(invAnswered, "%s after the chaos ended, %d logical requests or jobs still have no definitive answer: %s",
		w.deadline.Sub(w.calmAt), len(open), strings.Join(open, "; "))
}

// purger purges expired records now and then, as a store's background
// purger would, while clients run; sometimes at the very instant a record
// expires, where the store contract says it has.
func (w *world) purger() {
	s := w.s
	every := max(w.p.ttl/3, time.Minute)
	for !w.clientsDone() {
		next := s.now.Add(every)
		if at, ok := w.m.nextExpiry(s.now); ok && at.Before(next) && w.rng.IntN(2) == 0 {
			next = at
		}
		s.wait(next, nil, w.clientsDone)
		w.purge(s.now)
	}
}

func (w *world) purge(now time.Time) {
	const limit = 1 << 20
	n, err := w.store.Purge(context.Background(), now, limit)
	w.m.observePurge(now, limit, n, err)
}

func (w *world) clientsDone() bool {
	for _, lr := range w.reqs {
		if !lr.finished {
			return false
		}
	}
	return true
}

// finalChecks checks invariant 6 on the store once the world is idle: it
// holds at most one record per key used, and none once all have expired
// and been purged.
func (w *world) finalChecks() {
	if w.effects != nil {
		w.checkEffects()
		if w.failure != nil {
			return
		}
	}
	ids := len(w.m.ids)
	if c, ok := w.store.(Counter); ok {
		if n := c.Len(); n < 0 || n > ids {
			w.violate(invClean, "the store holds %d records after the run; %d keys were used", n, ids)
			return
		}
	}
	later := w.s.now.Add(w.p.ttl + 2*w.p.lease)
	w.s.now = later
	w.purge(later)
	if w.failure != nil {
		return
	}
	for _, id := range w.m.ids {
		rec, err := w.store.Get(context.Background(), id)
		w.m.observeGet(id, rec, err)
		if err == nil {
			w.violate(invClean, "%s still has a record (%s) once every record has expired and been purged", idName(id), rec.State)
			return
		}
	}
	if c, ok := w.store.(Counter); ok {
		if n := c.Len(); n != 0 {
			w.violate(invClean, "the store holds %d records once every record has expired and been purged", n)
		}
	}
}

func sortDurations(d []time.Duration) {
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && d[j] < d[j-1]; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// planCall draws what happens to one store call made by n.
func (w *world) planCall(n *node) callPlan {
	r, p := w.rng, &w.p
	pl := callPlan{pre: msBetween(r, 0, 20*time.Millisecond), post: msBetween(r, 0, 20*time.Millisecond)}
	now := w.s.now
	if !now.Before(w.calmAt) {
		return pl
	}
	pl.ghost = w.remote && r.Float64() < 0.5
	switch x := r.Float64(); {
	case x < p.pFail:
		pl.fault = faultFailBefore
	case x < p.pFail+p.pAmbiguous:
		pl.fault = faultFailAfter
		if r.Float64() < 0.5 {
			pl.fault = faultHangAfter
		}
	case x < p.pFail+p.pAmbiguous+p.pHang:
		pl.fault = faultHang
	}
	if r.Float64() < p.pSlow {
		pl.pre += msBetween(r, 0, p.slowMax)
	}
	if r.Float64() < p.pSlow {
		pl.post += msBetween(r, 0, p.slowMax)
	}
	w.weather(&pl, n, now.Sub(epoch))
	if pl.ghost {
		// A ghost lands as late as it would have arrived, or later still,
		// as a statement queued behind a lock or a packet retransmitted.
		pl.late = pl.pre
		if r.IntN(2) == 0 {
			pl.late = msBetween(r, 0, 2*p.lease)
		}
	}
	return pl
}

// planPartial draws whether a batch renewal of n leases fails in part
// (see batchFaultStore.RenewBatch): nil if not, else which leases are on
// the node that fails (at least one, never all), and whether their
// renewal lands before that node's answer is lost.
func (w *world) planPartial(n int) (sick []bool, lands bool) {
	r := w.rng
	if n < 2 || !w.s.now.Before(w.calmAt) || r.Float64() >= w.p.pPartial {
		return nil, false
	}
	sick = make([]bool, n)
	first := r.IntN(n)
	sick[first] = true
	for i := range sick {
		if i != first && r.IntN(2) == 0 {
			sick[i] = true
		}
	}
	if !slices.Contains(sick, false) {
		sick[(first+1)%n] = false
	}
	return sick, r.IntN(2) == 0
}

// weather applies to pl the spells of bad weather that n's call meets, at
// since into the run.
func (w *world) weather(pl *callPlan, n *node, since time.Duration) {
	r, p := w.rng, &w.p
	for _, win := range p.windows {
		if since < win.from || since >= win.to || (win.slot >= 0 && win.slot != n.slot) {
			continue
		}
		switch win.kind {
		case windowSlow:
			if r.Float64() < 0.5 {
				pl.pre += msBetween(r, 0, p.slowMax)
			} else {
				pl.post += msBetween(r, 0, p.slowMax)
			}
		case windowDown:
			pl.fault = faultHang
			if r.Float64() < 0.3 {
				pl.fault = faultFailBefore
			}
		case windowFlaky:
			if r.Float64() < 0.5 {
				pl.fault = [...]fault{faultFailBefore, faultFailAfter, faultHangAfter}[r.IntN(3)]
			}
		case windowAmbiguous:
			if r.Float64() < 0.5 {
				pl.fault = [...]fault{faultFailAfter, faultHangAfter}[r.IntN(2)]
			}
		case windowLag:
			pl.pre += msBetween(r, win.lag/2, win.lag)
			pl.post += msBetween(r, 0, win.lag/2)
		}
	}
}

func (w *world) attemptOf(r *http.Request) *attempt {
	i, _ := strconv.Atoi(r.Header.Get("X-Sim-Attempt"))
	return w.attempts[i]
}

// checkEffects checks invariant 2 on the database: a handler's or a job's
// run's work is committed if and only if its completion committed, so that at most one
// run's work is committed per record lifetime.
func (w *world) checkEffects() {
	done, err := w.effects.Committed()
	if err != nil {
		w.m.ownError("reading the committed work", err)
		return
	}
	rows := map[int]bool{}
	for _, n := range done {
		if n < 1 || n > len(w.m.execs) || rows[n] {
			w.violate(invOneCommit, "the database holds work of a handler run X%d that never was, or twice", n)
			return
		}
		rows[n] = true
	}
	for _, x := range w.m.execs {
		switch {
		case rows[x.n] && !x.committed:
			w.violate(invOneCommit, "X%d's work (%s, %s) is committed, but its outcome was never stored: a retry runs it again",
				x.n, idName(x.id), w.m.label(x.token))
			return
		case x.wrote && x.committed && !rows[x.n]:
			w.violate(invOneCommit, "X%d's outcome (%s, %s) is stored, but its work was rolled back: it is lost",
				x.n, idName(x.id), w.m.label(x.token))
			return
		}
	}
}
