package idemsim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// The invariants, numbered as in the package documentation. Contract is
// the store's own: every answer it gave matches what its contract (the doc
// comments of idem.Store) says about the calls that reached it.
const (
	invOneAtATime  = 1  // never two executions (handler or job runs) of one key at the same moment
	invOneCommit   = 2  // never two committed executions per record lifetime
	invReplay      = 3  // a replay is the whole stored response (or job outcome) of a run that served the same request (job), marked as a replay
	invFreed       = 4  // a key whose holder died is free again within one lease (plus the renewal interval)
	invAnswered    = 5  // a logical request (job) that keeps retrying (being delivered) gets a definitive answer (outcome)
	invClean       = 6  // after the run: nothing left running, the store within its bound
	invPolicy      = 7  // every answer and every record is what the policy says
	invContract    = 8  // the store answers as its contract says
	invPanic       = 9  // the simulated code panicked
	invDeterminism = 10 // the store failed on its own, or something escaped the scheduler
)

var invNames = map[int]string{
	invOneAtATime:  "1 (never two executions of one key at once)",
	invOneCommit:   "2 (never two committed executions per record lifetime)",
	invReplay:      "3 (a replay is the whole stored response or job outcome of a run that served the same request or job, and says so)",
	invFreed:       "4 (a key whose holder died is free again within one lease plus the renewal interval)",
	invAnswered:    "5 (every logical request or job that keeps retrying gets a definitive answer)",
	invClean:       "6 (nothing left running, store within its bound)",
	invPolicy:      "7 (every answer and every record is what the policy says)",
	invContract:    "store contract (the store's answers match idem.Store's documentation)",
	invPanic:       "panic",
	invDeterminism: "simulation integrity (the store failed with no fault injected)",
}

// model is what the handlers really did and what the store really holds,
// as seen from outside the Engine: the executions (handler runs) with
// their responses, and a shadow of every record, kept from the calls that
// reached the store and their answers.
type model struct {
	w        *world
	contract bool // check each store answer against the shadow

	execs   []*exec
	running map[idem.ID]*exec // the execution of each key running now

	shadow   map[idem.ID]*shadowRec
	maxLease map[string]time.Time  // per token: the latest lease its holder asked for
	leases   map[string]*leaseInfo // per token: its lease as its Engine learnt it (config.go)

	tokens   map[string]*tokenInfo
	execOf   map[string]*exec // by token
	order    []string         // the tokens, in order of first appearance
	tokenSeq int
	ids      []idem.ID // every ID used, in order of first use
	idSeen   map[idem.ID]bool
	jobIDs   map[idem.ID]bool // for each ID a request or job acquired: whether it was a job

	// The Engine's fingerprints, against the policy's rule: the first
	// attempt that carried each, and one attempt per request the policy
	// tells apart, by method, path and signature (see checkFingerprint).
	fpFirst  map[idem.Fingerprint]*attempt
	requests map[string][]*attempt
}

// response is an HTTP response: as a handler wrote it, or as a client
// received it.
type response struct {
	status   int
	header   http.Header // as sent
	body     []byte
	declared int  // the Content-Length the handler declared, or -1
	flushed  bool // the handler streamed it
	hijacked bool // the handler wrote it over a hijacked connection

	problem     string // see problemOf
	problemRead bool
}

// exec is one run of the handler, or of a job's function.
type exec struct {
	n         int
	id        idem.ID
	token     string
	node      *node
	att       *attempt
	start     time.Time
	end       time.Time
	running   bool
	outcome   string
	ctx       context.Context // the handler's or job's, once it works (see spells)
	resp      *response       // the whole response it wrote, if it wrote one
	wrote     bool            // it did its work (Effects)
	committed bool            // its completion committed
	// withheld: the Engine was told its completion found another holder
	// (ErrLockLost) or undid its work (ErrRolledBack), so its response
	// must not reach its client as the key's outcome.
	withheld bool
	// exempt: invariant 1 cannot hold for this run, which is documented:
	// its handler ignores its context, or its process froze while it ran
	// (a frozen process cannot be told to stop). Only fencing protects
	// the record from it.
	exempt string
	// forgotten: an operator forgot its key, with force, while it ran:
	// another run of the key may start beside it (see operator).
	forgotten bool

	// A job's run: how it ended, the result it returned, the error it
	// returned, and a permanent failure's message.
	fate   jobFate
	result []byte
	ferr   error
	msg    string
}

type tokenInfo struct {
	label string
	node  *node
	att   *attempt // the request that acquired it
	id    idem.ID
	ended bool // the request that acquired it has ended (its server proc returned)
	// released, recorded: the Engine asked the store to release it, to
	// complete it (whatever came of the call).
	released, recorded bool
}

// shadowRec is a record as the store must hold it.
type shadowRec struct {
	rec     idem.Record
	life    int // record lifetimes of this ID so far
	commits int // completions committed in this lifetime
}

func newModel(w *world, contract bool) *model {
	return &model{
		w:        w,
		contract: contract,
		running:  map[idem.ID]*exec{},
		fpFirst:  map[idem.Fingerprint]*attempt{},
		requests: map[string][]*attempt{},
		shadow:   map[idem.ID]*shadowRec{},
		maxLease: map[string]time.Time{},
		leases:   map[string]*leaseInfo{},
		tokens:   map[string]*tokenInfo{},
		execOf:   map[string]*exec{},
		idSeen:   map[idem.ID]bool{},
		jobIDs:   map[idem.ID]bool{},
	}
}

// label names a token in traces by its order of first appearance: the
// tokens themselves differ from run to run.
func (m *model) label(token string) string {
	if t, ok := m.tokens[token]; ok {
		return t.label
	}
	return "T?"
}

func (m *model) newToken(token string, n *node, id idem.ID, att *attempt) {
	if _, ok := m.tokens[token]; ok {
		return
	}
	m.tokenSeq++
	m.tokens[token] = &tokenInfo{label: fmt.Sprintf("T%d", m.tokenSeq), node: n, id: id, att: att}
	m.order = append(m.order, token)
}

// checkKeySpace judges the record att's Acquire names: requests and jobs
// never share one, whatever their scopes and keys (a job's record is under
// its JobID), so no request blocks a job, nor a job a request.
func (m *model) checkKeySpace(att *attempt, id idem.ID) {
	job := att.msg != nil
	if was, seen := m.jobIDs[id]; seen && was != job {
		m.w.violate(invPolicy, "%s (%s) takes the record %s, which a %s took before: requests and jobs must never share a record",
			att.name, att.what, idName(id), map[bool]string{true: "job", false: "request"}[was])
	}
	m.jobIDs[id] = job
}

func (m *model) useID(id idem.ID) {
	if !m.idSeen[id] {
		m.idSeen[id] = true
		m.ids = append(m.ids, id)
	}
}

// leaseAsked notes that token's holder asked the store for a lease until
// until (whether or not the call reaches it).
func (m *model) leaseAsked(token string, until time.Time) {
	if until.After(m.maxLease[token]) {
		m.maxLease[token] = until
	}
}

// startExec records a handler starting, and checks invariant 1.
func (m *model) startExec(id idem.ID, token string, n *node, att *attempt) *exec {
	x := &exec{n: len(m.execs) + 1, id: id, token: token, node: n, att: att, start: m.w.s.now, running: true}
	att.exec = x
	m.execs = append(m.execs, x)
	m.execOf[token] = x
	if other := m.running[id]; other != nil && other.exempt != "" {
		m.w.tracef("X%d starts beside X%d, whose handler %s: allowed", x.n, other.n, other.exempt)
	} else if other != nil && other.forgotten {
		m.w.tracef("X%d starts beside X%d, whose key an operator forgot: allowed", x.n, other.n)
	} else if other != nil {
		m.w.violate(invOneAtATime, "X%d (%s on %s) starts for %s while X%d (%s on %s) has run since %s",
			x.n, m.label(token), n.name(), idName(id), other.n, m.label(other.token), other.node.name(), m.w.at(other.start))
	}
	m.running[id] = x
	return x
}

// endExec records a handler's end.
func (m *model) endExec(x *exec, outcome string) {
	if !x.running {
		return
	}
	x.running, x.end, x.outcome = false, m.w.s.now, outcome
	if m.running[x.id] == x {
		delete(m.running, x.id)
	}
	m.w.tracef("X%d ends: %s", x.n, outcome)
}

// produce records the whole response a handler wrote.
func (m *model) produce(x *exec, r *response) {
	x.resp = r
}

// pause notes that n froze: its running handlers cannot be told to stop
// in time.
func (m *model) pause(n *node) {
	for _, x := range m.execs {
		if x.running && x.node == n && x.exempt == "" {
			x.exempt = "froze with its process"
		}
	}
}

// crash ends every execution of n: its process is gone.
func (m *model) crash(n *node) {
	for _, x := range m.execs {
		if x.running && x.node == n {
			m.endExec(x, "stopped by the crash")
		}
	}
}

func excerpt(b []byte) string {
	const n = 60
	if len(b) <= n {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%q...", b[:n])
}

// idName names an ID in traces: its scope's label and its key, cut short,
// and quoted if it holds bytes that are not printable ASCII (a job's key
// may).
func idName(id idem.ID) string {
	key := id.Key
	if len(key) > 12 {
		key = key[:8]
	}
	if strings.IndexFunc(key, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
		key = strconv.Quote(key)
	}
	if len(id.Key) > 12 {
		key = fmt.Sprintf("%s…(%d)", key, len(id.Key))
	}
	return scopeLabel(id.Scope) + "/" + key
}

// The shadow store: the contract of idem.Store applied to every call that
// reached the store, in the order they reached it (the scheduler runs one
// at a time). A store answer that disagrees is a contract violation; the
// shadow then follows what the store said, so that the invariants are
// judged on what really happened.

func (m *model) sh(id idem.ID) *shadowRec {
	s := m.shadow[id]
	if s == nil {
		s = &shadowRec{}
		m.shadow[id] = s
	}
	return s
}

func (m *model) contractf(format string, args ...any) {
	if m.contract {
		m.w.violate(invContract, format, args...)
	}
}

// ownError reports an error the store returned by itself: the simulation
// injects every failure, so a store that fails on its own breaks the
// run's determinism (or is broken).
func (m *model) ownError(op string, err error) {
	m.w.violate(invDeterminism, "%s failed with no fault injected: %v", op, err)
}

func (m *model) observeAcquire(n *node, a idem.Acquire, rec idem.Record, out idem.AcquireOutcome, err error) {
	m.useID(a.ID)
	if err != nil {
		m.ownError("Acquire", err)
		return
	}
	s := m.sh(a.ID)
	want := idem.AcquireExisting
	switch {
	case s.rec.State == 0 || expiredAt(s.rec, a.Now):
		want = idem.AcquireCreated
	case s.rec.State == idem.InFlight && leaseOver(s.rec, a.Now) && s.rec.Fingerprint == a.Fingerprint:
		want = idem.AcquireTookOver
	}
	tok := m.label(a.Token)
	m.w.tracef("acquire %s %s → %s", idName(a.ID), tok, out)
	if out != want {
		m.contractf("Acquire of %s by %s returned %s; the record (%s) calls for %s", idName(a.ID), tok, out, m.describe(s.rec), want)
	}
	if out == idem.AcquireTookOver {
		m.checkTakeover(a, s.rec)
	}
	switch out {
	case idem.AcquireCreated, idem.AcquireTookOver:
		if out == idem.AcquireCreated {
			s.life++
			s.commits = 0
		}
		s.rec = idem.Record{ID: a.ID, Fingerprint: a.Fingerprint, State: idem.InFlight, Token: a.Token,
			LeaseUntil: a.LeaseUntil, ExpiresAt: a.ExpiresAt, CreatedAt: a.Now}
		if err := sameRecord(rec, s.rec); err != nil {
			m.contractf("Acquire of %s by %s (%s) returned a record that differs from what it wrote: %v", idName(a.ID), tok, out, err)
		}
	case idem.AcquireExisting:
		if want == idem.AcquireExisting {
			if err := sameRecord(rec, s.rec); err != nil {
				m.contractf("Acquire of %s returned the existing record, but not as it is: %v", idName(a.ID), err)
			}
		}
		if rec.State == idem.InFlight && rec.Fingerprint == a.Fingerprint {
			if until, ok := m.maxLease[rec.Token]; ok && !a.Now.Before(until) {
				m.w.violate(invFreed, "at %s, %s is still held by %s, whose holder asked for no lease beyond %s",
					m.w.at(a.Now), idName(a.ID), m.label(rec.Token), m.w.at(until))
			}
		}
	}
}

func (m *model) describe(r idem.Record) string {
	if r.State == 0 {
		return "none"
	}
	return fmt.Sprintf("%s by %s, lease to %s, expires %s", r.State, m.label(r.Token), m.w.at(r.LeaseUntil), m.w.at(r.ExpiresAt))
}

// holds reports whether token holds id's in-flight record in the shadow.
func (m *model) holds(id idem.ID, token string) (*shadowRec, bool) {
	s := m.shadow[id]
	return s, s != nil && s.rec.State == idem.InFlight && s.rec.Token == token
}

// fenced checks the answer of a call conditional on the owner token.
func (m *model) fenced(op string, id idem.ID, token string, err error) (s *shadowRec, ok bool) {
	s, held := m.holds(id, token)
	switch {
	case err != nil && !errors.Is(err, idem.ErrLockLost):
		m.ownError(op, err)
		return s, false
	case held && err != nil:
		m.contractf("%s of %s by %s returned ErrLockLost, but %s holds the in-flight record", op, idName(id), m.label(token), m.label(token))
	case !held && err == nil:
		var rec idem.Record
		if s != nil {
			rec = s.rec
		}
		m.contractf("%s of %s by %s succeeded, but the token holds no in-flight record (%s)", op, idName(id), m.label(token), m.describe(rec))
	}
	return s, err == nil
}

func (m *model) observeRenew(id idem.ID, token string, until time.Time, err error) {
	s, ok := m.fenced("Renew", id, token, err)
	if ok && s != nil {
		if until.Before(s.rec.LeaseUntil) {
			m.w.tracef("renew %s %s moves the lease back from %s to %s", idName(id), m.label(token), m.w.at(s.rec.LeaseUntil), m.w.at(until))
		}
		if until.After(s.rec.LeaseUntil) {
			s.rec.LeaseUntil = until
		}
	}
}

func (m *model) observeRenewBatch(held []idem.Held, until time.Time, lost []bool, err error) {
	if err != nil {
		m.ownError("RenewBatch", err)
		return
	}
	for i, h := range held {
		var e error
		if lost[i] {
			e = idem.ErrLockLost
		}
		m.observeRenew(h.ID, h.Token, until, e)
	}
}

func (m *model) observeComplete(id idem.ID, token string, c idem.Completion, err error) {
	s, ok := m.fenced("Complete", id, token, err)
	m.w.tracef("complete %s %s → %v", idName(id), m.label(token), errName(err))
	if !ok || s == nil {
		return
	}
	s.rec.State = idem.Completed
	s.rec.CompletedAt, s.rec.ExpiresAt = c.CompletedAt, c.ExpiresAt
	s.rec.Response = cloneResponse(c.Response)
	s.commits++
	if x := m.execOf[token]; x != nil {
		x.committed = true
	}
	if s.commits > 1 {
		m.w.violate(invOneCommit, "a second completion of %s committed in one record lifetime (by %s)", idName(id), m.label(token))
	}
}

// errWithoutRollback is what a store's Release error says of the release
// itself once its word on the rolled-back transaction is set aside:
// ErrLockLost, nil, or a system error.
func errWithoutRollback(err error) error {
	if errors.Is(err, idem.ErrLockLost) {
		return idem.ErrLockLost
	}
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		for _, e := range joined.Unwrap() {
			if !errors.Is(e, idem.ErrRolledBack) {
				return e
			}
		}
	}
	return nil
}

// completionAnswered notes what the Engine was told of token's
// completion or release.
func (m *model) completionAnswered(token string, err error) {
	if x := m.execOf[token]; x != nil && (errors.Is(err, idem.ErrLockLost) || errors.Is(err, idem.ErrRolledBack)) {
		x.withheld = true
	}
}

func (m *model) observeRelease(id idem.ID, token string, err error) {
	if errors.Is(err, idem.ErrRolledBack) {
		// The store rolled the request's transaction back with the
		// release, and says so: the release itself is what the rest says.
		err = errWithoutRollback(err)
	}
	s, ok := m.fenced("Release", id, token, err)
	m.w.tracef("release %s %s → %v", idName(id), m.label(token), errName(err))
	if ok && s != nil {
		s.rec = idem.Record{}
	}
}

func (m *model) observeGet(id idem.ID, rec idem.Record, err error) {
	s := m.shadow[id]
	exists := s != nil && s.rec.State != 0
	switch {
	case err != nil && !errors.Is(err, idem.ErrNotFound):
		m.ownError("Get", err)
	case err != nil && exists:
		m.contractf("Get of %s returned ErrNotFound, but the store holds %s", idName(id), m.describe(s.rec))
	case err == nil && !exists:
		m.contractf("Get of %s returned a record (%s), but none should exist", idName(id), rec.State)
	case err == nil:
		if e := sameRecord(rec, s.rec); e != nil {
			m.contractf("Get of %s: %v", idName(id), e)
		}
	}
}

func (m *model) observePurge(now time.Time, limit, n int, err error) {
	if err != nil {
		m.ownError("Purge", err)
		return
	}
	expired := 0
	for _, id := range m.ids {
		if s := m.shadow[id]; s != nil && s.rec.State != 0 && expiredAt(s.rec, now) {
			expired++
			s.rec = idem.Record{}
		}
	}
	if want := min(expired, limit); n != want {
		m.contractf("Purge deleted %d records; %d had expired", n, want)
	}
	m.w.tracef("purge → %d", n)
}

// storePurged checks, once a timer of the store's clock has done its work
// (a pass of its purger, which reads the clock when it fires), that the
// store then holds none of the records expired by then, and every other
// one as it was: its purger deletes what has expired, all of it, and
// nothing else.
func (m *model) storePurged() {
	at := m.w.s.now
	deleted := 0
	for _, id := range m.ids {
		s := m.shadow[id]
		if s == nil || s.rec.State == 0 {
			continue
		}
		rec, err := m.w.store.Get(context.Background(), id)
		switch {
		case err != nil && !errors.Is(err, idem.ErrNotFound):
			m.ownError("Get", err)
			return
		case expiredAt(s.rec, at):
			if err == nil {
				m.contractf("the store's purger, at %s, left %s (%s), expired by then", m.w.at(at), idName(id), m.describe(s.rec))
			}
			s.rec = idem.Record{}
			deleted++
		case err != nil:
			m.contractf("the store's purger, at %s, deleted %s (%s), which had not expired", m.w.at(at), idName(id), m.describe(s.rec))
			s.rec = idem.Record{}
		default:
			if e := sameRecord(rec, s.rec); e != nil {
				m.contractf("the store's purger, at %s, changed %s: %v", m.w.at(at), idName(id), e)
			}
		}
	}
	m.w.tracef("the store's purger at %s → %d expired", m.w.at(at), deleted)
}

// nextExpiry returns the earliest instant after now at which a record the
// shadow holds expires (for an in-flight one, ExpiresAt or its lease's
// end, whichever is later).
func (m *model) nextExpiry(now time.Time) (time.Time, bool) {
	var next time.Time
	for _, id := range m.ids {
		s := m.shadow[id]
		if s == nil || s.rec.State == 0 {
			continue
		}
		at := s.rec.ExpiresAt
		if s.rec.State == idem.InFlight && s.rec.LeaseUntil.After(at) {
			at = s.rec.LeaseUntil
		}
		if at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next, !next.IsZero()
}

func sameRecord(got, want idem.Record) error {
	switch {
	case got.ID != want.ID:
		return fmt.Errorf("ID %s, want %s", idName(got.ID), idName(want.ID))
	case got.State != want.State:
		return fmt.Errorf("state %s, want %s", got.State, want.State)
	case got.Fingerprint != want.Fingerprint:
		return errors.New("another fingerprint")
	case got.Token != want.Token:
		return errors.New("another token")
	case !got.LeaseUntil.Equal(want.LeaseUntil):
		return fmt.Errorf("lease until %s, want %s", got.LeaseUntil, want.LeaseUntil)
	case !got.ExpiresAt.Equal(want.ExpiresAt):
		return fmt.Errorf("expires at %s, want %s", got.ExpiresAt, want.ExpiresAt)
	case !got.CreatedAt.Equal(want.CreatedAt):
		return fmt.Errorf("created at %s, want %s", got.CreatedAt, want.CreatedAt)
	case want.State == idem.Completed && !got.CompletedAt.Equal(want.CompletedAt):
		return fmt.Errorf("completed at %s, want %s", got.CompletedAt, want.CompletedAt)
	}
	if want.State != idem.Completed {
		return nil
	}
	g, w := got.Response, want.Response
	if g.Status != w.Status || !bytes.Equal(g.Body, w.Body) {
		return fmt.Errorf("response %d with %d bytes, want %d with %d bytes", g.Status, len(g.Body), w.Status, len(w.Body))
	}
	if !slices.EqualFunc(g.Header, w.Header, func(a, b exchange.HeaderField) bool {
		return a.Name == b.Name && slices.Equal(a.Values, b.Values)
	}) {
		return fmt.Errorf("response header %v, want %v", g.Header, w.Header)
	}
	return nil
}

func cloneResponse(r exchange.Response) exchange.Response {
	c := exchange.Response{Status: r.Status, Body: bytes.Clone(r.Body)}
	if c.Body == nil {
		c.Body = []byte{}
	}
	for _, f := range r.Header {
		c.Header = append(c.Header, exchange.HeaderField{Name: f.Name, Values: slices.Clone(f.Values)})
	}
	return c
}

func errName(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, idem.ErrLockLost):
		return "lock lost"
	}
	return err.Error()
}
