package idem

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
)

// Engine is the idempotency state machine. Adapters hand it each request with
// Begin and carry out the exchange.Decision; it knows nothing about HTTP frameworks.
// An Engine is safe for concurrent use.
type Engine struct {
	cfg           Config
	clock         Clock
	realClock     bool      // the system clock, so one reading serves both the record and the latency
	epoch         time.Time // time.Now at New: the reference of readClock on a LocalStore
	local         bool      // the store is a LocalStore: its calls need no deadline
	leaseless     bool      // the store is local or used by one process: it takes no leases
	replayHeaders []string
	problems      [len(problemSpecs)]preparedProblem
	retryAfter    []string

	keySecret   string // Config.KeyHashSecret, or random
	tokenPrefix string
	tokenSeq    atomic.Uint64
	renewer     *renewer

	throttle throttle // of the log's WARN and ERROR lines
}

type preparedProblem struct {
	problemSpec
	typeURI string
}

// New returns an Engine for cfg, with defaults for its zero fields. It panics
// if cfg.Store is nil: that is a programming error, found at start-up.
func New(cfg Config) *Engine {
	cfg.setDefaults()
	_, realClock := cfg.Clock.(systemClock)
	_, local := cfg.Store.(LocalStore)
	op, _ := cfg.Store.(OneProcessStore)
	leaseless := local || op != nil && op.OneProcess()
	e := &Engine{cfg: cfg, clock: cfg.Clock, realClock: realClock, local: local, leaseless: leaseless, replayHeaders: cfg.replayHeaderSet(),
		epoch: time.Now()}
	e.renewer = newRenewer(e)
	for i, spec := range problemSpecs {
		e.problems[i] = preparedProblem{spec, cfg.ProblemBase + spec.name}
	}
	secs := (cfg.RetryAfter + time.Second - 1) / time.Second
	e.retryAfter = []string{strconv.FormatInt(int64(secs), 10)}
	var prefix [8]byte
	_, _ = rand.Read(prefix[:]) // never fails on supported platforms
	e.tokenPrefix = hex.EncodeToString(prefix[:])
	e.keySecret = string(cfg.KeyHashSecret)
	if e.keySecret == "" {
		var secret [32]byte
		_, _ = rand.Read(secret[:])
		e.keySecret = string(secret[:])
	}
	return e
}

// Config returns the Engine's configuration, with New's defaults in its
// zero fields: the settings in force, for a program to log or check.
func (e *Engine) Config() Config { return e.cfg }

// guards reports whether requests with this method are subject to
// idempotency.
func (e *Engine) guards(method string) bool {
	for _, m := range e.cfg.Methods {
		if m == method {
			return true
		}
	}
	return false
}

// begin decides what to do with a request (exchange.Engine.Begin). The
// decision itself is decideRequest's and decide's; begin gathers what they
// need and carries it out.
func (e *Engine) begin(ctx context.Context, r *exchange.Request) exchange.Decision {
	if !e.guards(r.Method) {
		return exchange.Decision{}
	}
	// One reading of the clock serves the request's duration, the record's
	// times and the store call's start.
	began := e.readClock()
	key, keyErr := ParseKey(r.KeyLines, e.cfg.StrictKeys)
	if keyErr == nil && e.cfg.ValidateKey != nil {
		if err := e.cfg.ValidateKey(key); err != nil {
			keyErr = fmt.Errorf("%w: %w", ErrKeyInvalid, err)
		}
	}
	var read []byte
	var bodyErr error
	if keyErr == nil {
		read, bodyErr = e.takeBody(r)
	}
	if v, final := decideRequest(keyErr, bodyErr, e.cfg.KeyOptional); final {
		return e.carryOut(ctx, r, key, v, keyErr, nil, &outcomeOf{}, began, time.Time{})
	}
	a := e.acquisition(r.Scope, key, e.cfg.Fingerprint(*r), began)
	got := e.acquire(ctx, &a, began)
	v := decide(&got.rec, got.outcome, got.err, a.Fingerprint, e.cfg.FailOpen)
	d := e.carryOut(ctx, r, key, v, nil, &a, &got, began, got.done)
	d.Body = read
	return d
}

// takeBody reads the request body within Config.MaxRequestBody, unless the
// adapter gave it in memory: read is what Begin read (nil otherwise).
func (e *Engine) takeBody(r *exchange.Request) (read []byte, err error) {
	if r.Body == nil && r.BodyReader != nil {
		read, err = readBody(r.BodyReader, r.ContentLength, e.cfg.MaxRequestBody)
		r.Body = read
		return read, err
	}
	if int64(len(r.Body)) > e.cfg.MaxRequestBody {
		return nil, ErrBodyTooLarge
	}
	return nil, nil
}

// acquisition is the Acquire for a request, as of start (readClock's) on
// the Engine's clock: with the system clock, start itself,
// so that one reading of the time serves the record, the store call's
// latency and the request's duration.
func (e *Engine) acquisition(scope, key string, fp Fingerprint, start time.Time) Acquire {
	now := start
	if !e.realClock {
		now = e.clock.Now()
	}
	lease := e.cfg.Lease
	if e.leaseless {
		lease = MaxDuration // held until the handler ends: see LocalStore
	}
	return Acquire{
		ID:          ID{Scope: scope, Key: key},
		Fingerprint: fp,
		Token:       e.newToken(),
		Now:         now,
		LeaseUntil:  now.Add(lease),
		ExpiresAt:   now.Add(e.cfg.TTL),
	}
}

// outcomeOf is what came of the Acquire call for a request.
type outcomeOf struct {
	rec         Record
	outcome     AcquireOutcome
	err         error
	called      bool      // Acquire was called
	start, done time.Time // the call's, on the monotonic clock (done: and any release after it; zero if not read)
	latency     time.Duration
}

// acquire calls Store.Acquire within StoreTimeout, unless the client has
// already gone. A key taken too late to be run safely counts as a store
// error, and a failed call releases what it may have written.
//
// The call is not cut short when the client leaves: it ends when the store
// answers or StoreTimeout passes. So a store that does not answer is a
// store error whoever left first (clients with short timeouts in front of
// a frozen store must not hide it as client-gone); a store that answers
// after its client left gives the key it took back, and the request is
// client-gone.
func (e *Engine) acquire(ctx context.Context, a *Acquire, start time.Time) outcomeOf {
	o := outcomeOf{start: start}
	if ctx.Err() != nil { // a client already gone is not worth a store call
		o.err = errClientGone
		return o
	}
	callCtx := ctx
	if !e.local { // a local store answers at once, and sees the client leave
		callCtx = context.WithoutCancel(ctx)
	}
	actx, cancel := e.storeContext(callCtx)
	o.rec, o.outcome, o.err = e.cfg.Store.Acquire(actx, *a)
	timedOut := context.Cause(actx) == context.DeadlineExceeded
	cancel()
	o.called = true
	// The clock is read again only for what reads it: the lease check of a
	// store that takes leases, and the events of errors or of a listener.
	if !e.leaseless || o.err != nil || e.listens(ctx, slog.LevelDebug) {
		o.done = elapsed(start)
		o.latency = o.done.Sub(start)
	}
	if o.err != nil && timedOut && !errors.Is(o.err, context.DeadlineExceeded) {
		o.err = fmt.Errorf("%w (no answer within StoreTimeout: %w)", o.err, context.DeadlineExceeded)
	}
	if o.err == nil && o.outcome != AcquireExisting && !e.leaseless && e.renewer.tooLate(a.LeaseUntil, e.clockAt(o.done)) {
		o.err = errAcquireTooLate
	}
	gone := ctx.Err() != nil
	taken := o.err == nil && o.outcome != AcquireExisting
	if o.err != nil && !errors.Is(o.err, ErrStoreFull) || taken && gone {
		e.releaseOrphan(ctx, *a)
		o.done = elapsed(start)
	}
	switch {
	case !gone || errors.Is(o.err, ErrStoreFull):
	case o.err == nil, !timedOut && (errors.Is(o.err, context.Canceled) || errors.Is(o.err, context.DeadlineExceeded)):
		// The store answered, or gave up because the client did (a local
		// store sees it leave): nobody is left to answer.
		o.err = errClientGone
	default:
		o.err = fmt.Errorf("%w (%w)", o.err, errLeftDuringFault)
	}
	return o
}

// carryOut turns a verdict into the exchange.Decision an adapter carries out, and
// reports it as an event (as of at). a and o are the store's part, when it
// was asked.
func (e *Engine) carryOut(ctx context.Context, r *exchange.Request, key string, v verdict, keyErr error, a *Acquire, o *outcomeOf, began, at time.Time) exchange.Decision {
	d := exchange.Decision{Action: v.action}
	switch {
	case v.action == exchange.Run:
		d.Lock = e.newLock(ctx, r, *a, began)
	case v.replay:
		d.Response, d.Replayed = o.rec.Response, true
	case v.problem == exchange.ProblemPayloadTooLarge:
		d.Response = e.bodyTooLarge(e.cfg.MaxRequestBody)
	case v.problem != "":
		d.Response = e.problem(v.problem, e.detail(v.problem, keyErr))
	case v.status != 0:
		d.Response = exchange.Response{Status: v.status, Body: []byte{}}
	}
	if v.event == 0 || v.level < slog.LevelWarn && !e.listens(ctx, v.level) {
		return d
	}
	if at.IsZero() {
		at = elapsed(began)
	}
	ev := e.event(v.event, r.Method, r.Path, key, began, at)
	ev.Status = d.Response.Status
	if o.called {
		ev.StoreCall, ev.StoreLatency = "acquire", o.latency
	}
	if v.event == idemevent.StoreError || v.event == idemevent.Unprotected {
		ev.Err = o.err
	}
	e.emit(ctx, &ev, v.level)
	return d
}

// errAcquireTooLate says why a request whose Acquire succeeded was not run.
var errAcquireTooLate = errors.New("the store answered Acquire when the lease it took was about to run out: " +
	"the handler was not run, since it could not be told to stop before another request may take the key over")

// releaseOrphan frees the in-flight record a failed Acquire may have left
// behind. A store can fail after its write took effect (the request's
// context cancelled while the INSERT ran, a connection lost before the
// reply): the record then holds the key with a token nobody will finish,
// and every retry would get 409 until its lease ran out. The token is this
// request's own, so the release is fenced like any other; if nothing was
// written it changes nothing. It runs even if the client has gone, within
// a second (or RenewEvery, if shorter): a store too slow for that is in
// trouble anyway, and the orphan then frees itself when its lease runs out.
func (e *Engine) releaseOrphan(ctx context.Context, a Acquire) {
	ctx, cancel := e.timeoutContext(context.WithoutCancel(ctx), min(e.cfg.RenewEvery, e.cfg.StoreTimeout, time.Second))
	defer cancel()
	_ = e.cfg.Store.Release(ctx, a.ID, a.Token)
}

// elapsed returns now as ref plus the time elapsed since ref on the
// monotonic clock: one clock reading where time.Now takes two (wall and
// monotonic). ref must carry a monotonic reading (time.Now's do). The
// result serves for durations and for comparisons with times that carry
// one too; its wall reading is ref's plus the elapsed time, so it is not
// written to stores, which may reckon by the wall clock.
func elapsed(ref time.Time) time.Time { return ref.Add(time.Since(ref)) }

// readClock reads the time for a request's start or its completion: with
// the system clock and a LocalStore, one monotonic reading from the
// Engine's start (elapsed), since such a store lives in this process and
// reckons its records' times against each other, never against another
// process's wall clock (see LocalStore); otherwise time.Now, whose wall
// reading a store may write and compare across processes.
func (e *Engine) readClock() time.Time {
	if e.local && e.realClock {
		return elapsed(e.epoch)
	}
	return time.Now()
}

// clockAt is the Engine's clock reading for the moment time.Now read as
// wall: the same reading with the default clock, saving a call to it.
func (e *Engine) clockAt(wall time.Time) time.Time {
	if e.realClock {
		return wall
	}
	return e.clock.Now()
}

// storeContext bounds a store call made for a request by
// Config.StoreTimeout, on the Engine's clock; a LocalStore needs no bound.
func (e *Engine) storeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if e.local {
		return ctx, noCancel
	}
	return e.timeoutContext(ctx, e.cfg.StoreTimeout)
}

func noCancel() {}

// timeoutContext is context.WithTimeout on the Engine's clock: with a clock
// of its own (tests, the simulation), deadlines pass in that clock's time.
func (e *Engine) timeoutContext(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if e.realClock {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
			return ctx, noCancel // an earlier deadline already bounds the call
		}
		return context.WithTimeout(ctx, d)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	t := e.clock.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return ctx, func() {
		t.Stop()
		cancel(context.Canceled)
	}
}

// withheldResponse is exchange.Engine.WithheldResponse: a 503
// store-unavailable problem with Retry-After, which the client retries
// with its key, to get the key's outcome or run the request again.
func (e *Engine) withheldResponse() exchange.Response {
	return e.problem(exchange.ProblemStoreUnavailable,
		"The request's outcome could not be recorded (its work was undone, or another request holds its key now), "+
			"so it is not sent. Retry with the same key.")
}

// bodyTooLarge is exchange.Engine.BodyTooLarge: the 413 payload-too-large
// problem for a request body over limit bytes.
func (e *Engine) bodyTooLarge(limit int64) exchange.Response {
	return e.problem(exchange.ProblemPayloadTooLarge, fmt.Sprintf("The request body exceeds the limit of %d bytes.", limit))
}

// problem renders one of the Engine's own problems.
func (e *Engine) problem(name, detail string) exchange.Response {
	for i := range e.problems {
		p := &e.problems[i]
		if p.name != name {
			continue
		}
		resp := exchange.Problem{Type: p.typeURI, Title: p.title, Status: p.status, Detail: detail}.Response()
		if p.status == 409 || p.status == 429 || p.status == 503 {
			resp.Header = append(resp.Header, exchange.HeaderField{Name: "Retry-After", Values: e.retryAfter})
		}
		return resp
	}
	panic("idem: unknown problem " + name)
}

func (e *Engine) newToken() string {
	var b [16 + 1 + 16]byte
	buf := append(b[:0], e.tokenPrefix...)
	buf = append(buf, '-')
	buf = strconv.AppendUint(buf, e.tokenSeq.Add(1), 16)
	return string(buf)
}

// readBody reads at most limit bytes, failing with ErrBodyTooLarge as soon as
// the body is known to be longer, so an oversized body is never buffered
// whole. The buffer grows as bytes arrive, never ahead of them: a declared
// Content-Length is only a bound to check, so clients that announce large
// bodies and send nothing cost nothing. A limit enforced by a reader
// outside idemkit (http.MaxBytesReader) is reported as ErrBodyTooLarge too.
func readBody(r io.Reader, contentLength, limit int64) ([]byte, error) {
	if contentLength > limit {
		return nil, ErrBodyTooLarge
	}
	size := int64(512)
	if contentLength >= 0 {
		size = min(contentLength+1, size) // +1: room for the read that reports EOF
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grows by doubling, as bytes arrive
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, ErrBodyTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			if tooLarge(err) {
				return nil, ErrBodyTooLarge
			}
			return nil, err
		}
	}
}

// tooLarge reports whether a body reader's error says the body exceeded a
// limit set outside idemkit.
func tooLarge(err error) bool {
	var mb *http.MaxBytesError
	return errors.As(err, &mb) || errors.Is(err, ErrBodyTooLarge)
}
