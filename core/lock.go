package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
)

// Lock is held by the one request that runs the handler for a key. The
// in-flight record in the store, with its lease, is the lock; no mutex or
// transaction is held while the handler runs. While held, and until the
// handler's outcome is recorded, the lease is renewed every
// Config.RenewEvery by the Engine's renewer (see renewer.go), so a slow
// handler or a slow completion keeps its key, and a crashed process loses
// it within one lease.
//
// The handler must run with Context as its request context: it is
// cancelled with cause ErrLeaseLost if the lease is lost, and with
// ErrHandlerTimeout after Config.HandlerTimeout.
//
// The adapter copies the response body into the Lock with Write as the
// handler writes it, then ends the Lock exactly once with Finish or Abandon.
// A Lock must not be used after it ends.
type lock struct {
	e      *Engine
	method string
	path   string
	id     ID
	token  string
	began  time.Time

	ctx      lockCtx
	detached detachedCtx // Finish's context, see detach
	timeout  Timer       // Config.HandlerTimeout, if set

	body     []byte
	bodyBuf  *[]byte // pooled backing of body, returned when the lock ends
	overflow bool
	sent     *headerScratch // the replayable headers as sent, once they were (see headerSent)

	// mu guards state (see lockState): it orders the handler's end
	// (Finish, Abandon) against the renewer cancelling its context, which
	// must stay as it is once the outcome is being recorded, since a
	// transactional completion may be committing a transaction bound to it.
	mu    sync.Mutex
	state lockState

	// The renewal schedule, guarded by the renewer's mutex.
	renewAt    time.Time // when the next renewal is due
	leaseEnd   time.Time // when the lease runs out unless renewed, as the store reckons it
	renewing   bool      // a renewal of this lock is queued or under way
	held       bool      // registered with the renewer
	disowned   bool      // the store said another request holds the key: renewing is pointless
	prev, next *lock
}

func (e *Engine) newLock(ctx context.Context, r *exchange.Request, a Acquire, began time.Time) *lock {
	l := &lock{e: e, method: r.Method, path: r.Path, id: a.ID, token: a.Token, began: began}
	l.ctx.parent, l.ctx.l = ctx, l
	if e.cfg.HandlerTimeout > 0 {
		l.timeout = e.clock.AfterFunc(e.cfg.HandlerTimeout, func() { l.stopHandler(ErrHandlerTimeout) })
	}
	if !e.leaseless { // a local or one-process store's lock needs no renewal: see LocalStore
		e.renewer.add(l, a.Now.Add(e.cfg.RenewEvery), a.LeaseUntil)
	}
	return l
}

// Context returns the context the handler must run with: the request's
// context given to Begin, cancelled with cause ErrLeaseLost as soon as the
// Engine knows the lease is lost (or about to run out because renewals
// failed), and with ErrHandlerTimeout after Config.HandlerTimeout. HeldKey
// finds the key and owner token in it.
func (l *lock) Context() context.Context { return &l.ctx }

// stopHandler cancels the handler's context with cause, unless the
// handler has already returned.
func (l *lock) stopHandler(cause error) {
	l.mu.Lock()
	if l.state.handlerRuns() {
		l.ctx.stop(cause)
	}
	l.mu.Unlock()
}

// Write keeps a copy of p as part of the response body to store. Adapters
// pass every byte the handler writes, whether or not the client accepted
// it, so that the stored body is the handler's response, whole. It always
// succeeds; past Config.MaxResponseBody it stops copying and the response
// will not be stored.
func (l *lock) Write(p []byte) (int, error) {
	if l.overflow {
		return len(p), nil
	}
	if len(l.body)+len(p) > l.e.cfg.MaxResponseBody {
		l.overflow = true
		l.recycleBody()
		return len(p), nil
	}
	if l.body == nil {
		l.bodyBuf = captureBufs.Get().(*[]byte)
		l.body = (*l.bodyBuf)[:0]
	}
	l.body = append(l.body, p...)
	return len(p), nil
}

// Finish ends the Lock after the handler wrote a complete response with this
// status and these headers. A storable response is recorded for replay;
// any other releases the key at once so a retry runs the handler again. The
// store is written even if ctx was cancelled meanwhile (the client may have
// gone; its retry still deserves the replay), within Config.StoreTimeout,
// and the lease is renewed until the store has answered, so that a slow
// completion never lets a retry run the handler again.
//
// It reports what became of the response (see exchange.Outcome): the adapter must
// act on it, and withhold a response whose work was rolled back or whose
// key another request holds (exchange.Finished.Withhold). A Lock's second end
// reports the zero exchange.Finished.
func (l *lock) Finish(ctx context.Context, status int, header exchange.HeaderReader) exchange.Finished {
	if !l.finishing() {
		return exchange.Finished{}
	}
	defer l.end()
	detached := l.detach(ctx)
	ctx, cancel := l.e.storeContext(detached)
	defer cancel()
	switch {
	case !exchange.Storable(status):
		return l.release(ctx, exchange.ReasonStatus, status)
	case l.overflow:
		return l.release(ctx, exchange.ReasonTooLarge, status)
	case !l.wholeBody(header):
		return l.release(ctx, exchange.ReasonIncomplete, status)
	}
	return l.complete(ctx, detached, status, header)
}

// complete records the response: the store copies what it keeps, so the
// captured body and headers are lent to it and recycled once Complete
// returns. A completion that failed releases the key (detached is the
// context for that second call).
func (l *lock) complete(ctx, detached context.Context, status int, header exchange.HeaderReader) exchange.Finished {
	hs := l.sent
	var stored []exchange.HeaderField
	if hs != nil {
		stored = hs.sent
		l.sent = nil
	} else {
		hs = headerScratchPool.Get().(*headerScratch)
		stored = l.storedHeader(header, hs)
	}
	resp := exchange.Response{Status: status, Header: stored, Body: l.body}
	if resp.Body == nil {
		resp.Body = []byte{}
	}
	start := l.e.readClock()
	now := l.e.clockAt(start)
	err := l.e.cfg.Store.Complete(ctx, l.id, l.token, Completion{
		Response:    resp,
		CompletedAt: now,
		ExpiresAt:   now.Add(l.e.cfg.TTL),
	})
	l.recycleBody()
	hs.recycle()
	f := finished(err, "", true)
	if f.Outcome == exchange.Recorded && !l.e.listens(ctx, slog.LevelDebug) {
		return f // nobody reads the event: neither it nor its times are made
	}
	done := elapsed(start)
	ev := l.e.event(idemevent.Stored, l.method, l.path, l.id.Key, l.began, done)
	ev.Status, ev.StoreCall, ev.StoreLatency = status, "complete", done.Sub(start)
	switch {
	case f.Outcome == exchange.Recorded:
		l.e.emit(ctx, &ev, slog.LevelDebug)
	case f.Outcome == exchange.LockLost:
		ev.Kind, ev.Reason = idemevent.NotStored, exchange.ReasonLockLost
		l.e.emit(ctx, &ev, slog.LevelWarn)
	default:
		ev.Kind, ev.Reason, ev.Err = idemevent.NotStored, f.Reason, err
		l.e.emit(ctx, &ev, slog.LevelError)
		// The record may still be in flight: free it now rather than after
		// its lease. If the store is down this fails too, and the lease
		// frees the key later. Fenced: a completion that did commit
		// despite the error is left alone.
		rctx, cancel := l.e.storeContext(detached)
		_ = l.e.cfg.Store.Release(rctx, l.id, l.token)
		cancel()
	}
	return f
}

// wholeBody reports whether the captured body can be the whole response:
// a declared Content-Length must match what the handler wrote.
func (l *lock) wholeBody(header exchange.HeaderReader) bool {
	if header == nil {
		return true
	}
	var cl []string
	if h, ok := header.(http.Header); ok {
		cl = h["Content-Length"] // canonical already: skip Values' canonicalisation
	} else {
		cl = header.Values("Content-Length")
	}
	if len(cl) == 0 {
		return true
	}
	n, err := strconv.ParseInt(cl[0], 10, 64)
	return err == nil && n == int64(len(l.body))
}

// Abandon ends the Lock without storing anything: the handler panicked, or
// its response was streamed, hijacked or otherwise not captured whole. The
// key is released at once so a retry runs the handler again. It reports
// what became of the response, as Finish does: exchange.NotRecorded, or exchange.RolledBack
// and exchange.LockLost, which the adapter acts on as for Finish.
func (l *lock) Abandon(ctx context.Context, reason exchange.Reason) exchange.Finished {
	if !l.finishing() {
		return exchange.Finished{}
	}
	defer l.end()
	ctx, cancel := l.e.storeContext(l.detach(ctx))
	defer cancel()
	return l.release(ctx, reason, 0)
}

// LeaveRunning ends the Lock for a handler that a timeout middleware
// registered inside idemkit (named by middleware) gave up on and left
// running on a goroutine of its own, having answered status for it:
// nothing is stored, and the key is not released at once, which would let
// a retry run beside the handler, but left locked for one lease (Config.
// Lease): the lease is no longer renewed, and a store that takes no
// leases (see LocalStore) has the key released once that time has
// passed. Retries meanwhile get 409. The handler's context is cancelled
// with ErrLeaseLost: from then on another request may run the key, so the
// handler must stop and not commit its work. An error is logged: register
// the timeout before idemkit, or use Config.HandlerTimeout. exchange.
// ResponseCapture.End does this for the adapters built on net/http; an adapter that finds such a
// handler by its framework's means calls it instead of Finish.
func (l *lock) LeaveRunning(ctx context.Context, status int, middleware string) {
	l.ctx.stop(ErrLeaseLost) // first, while nothing else can have ended it
	if _, ok := l.move(lockLeftRunning); !ok {
		return
	}
	l.stopTimeout()
	l.recycleBody()
	if !l.e.leaseless {
		l.e.renewer.remove(l)
	} else {
		id, token, detached := l.id, l.token, context.WithoutCancel(ctx)
		l.e.clock.AfterFunc(l.e.cfg.Lease, func() {
			sctx, cancel := l.e.storeContext(detached)
			defer cancel()
			_ = l.e.cfg.Store.Release(sctx, id, token) // fenced: a key taken anew is left alone
		})
	}
	now := time.Now()
	ev := l.e.event(idemevent.NotStored, l.method, l.path, l.id.Key, l.began, now)
	ev.Status, ev.Reason = status, exchange.ReasonTimeoutInside
	ev.Err = fmt.Errorf("%s, registered inside idemkit, answered %d while the handler may still run: the key stays "+
		"locked for a lease, but a handler that runs on past it may run beside a retry; register the timeout "+
		"before idemkit's middleware, or use Config.HandlerTimeout", middleware, status)
	l.e.emit(ctx, &ev, slog.LevelError)
}

// HandlerMayRun reports whether the Lock ended while its handler may still
// be running (LeaveRunning): a timeout middleware registered inside
// idemkit answered, and lets the handler go on in a goroutine of its own.
// An adapter must then leave the request and the framework's context as
// that goroutine may still be using them. It may be called after the Lock
// ended, from the goroutine that ended it.
func (l *lock) HandlerMayRun() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == lockLeftToLease
}

// detach keeps ctx's values but not its cancellation: the outcome of a
// request that ran must be recorded even if its client has gone. It is
// context.WithoutCancel kept inside the Lock, which ends once, so the
// detached context costs no allocation. It does not ask ctx for Done,
// which would make a cancellable context allocate its channel.
func (l *lock) detach(ctx context.Context) context.Context {
	l.detached.parent = ctx
	return &l.detached
}

// detachedCtx is a context with its parent's values and no cancellation or
// deadline.
type detachedCtx struct{ parent context.Context }

func (*detachedCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*detachedCtx) Done() <-chan struct{}       { return nil }
func (*detachedCtx) Err() error                  { return nil }
func (c *detachedCtx) Value(key any) any         { return c.parent.Value(key) }
func (c *detachedCtx) String() string            { return "idem.Lock.detached" }

// release frees the key for a response not recorded for reason. A
// transactional store rolls the handler's writes back with it, and says so.
func (l *lock) release(ctx context.Context, reason exchange.Reason, status int) exchange.Finished {
	l.recycleBody()
	start := time.Now()
	err := l.e.cfg.Store.Release(ctx, l.id, l.token)
	f := finished(err, reason, false)
	level := slog.LevelDebug
	if err != nil && !errors.Is(err, ErrLockLost) && !errors.Is(err, ErrRolledBack) {
		level = slog.LevelError
	}
	if level < slog.LevelWarn && !l.e.listens(ctx, level) {
		return f
	}
	done := elapsed(start)
	ev := l.e.event(idemevent.NotStored, l.method, l.path, l.id.Key, l.began, done)
	ev.Status, ev.Reason, ev.StoreCall, ev.StoreLatency = status, reason, "release", done.Sub(start)
	if level == slog.LevelError {
		ev.Err = err
	}
	l.e.emit(ctx, &ev, level)
	return f
}

var captureBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func (l *lock) recycleBody() {
	l.recycleSent()
	if l.bodyBuf != nil && cap(l.body) <= 64<<10 {
		*l.bodyBuf = l.body[:0]
		captureBufs.Put(l.bodyBuf)
	}
	l.body, l.bodyBuf = nil, nil
}

// finishing marks the handler as returned and reports whether this call is
// the first to end the Lock. From here on the handler's context is never
// cancelled for a lost lease (a transactional completion may be committing
// a transaction bound to it), but the lease is still renewed.
func (l *lock) finishing() bool {
	if _, ok := l.move(lockReturned); !ok {
		return false
	}
	l.stopTimeout()
	return true
}

// stopTimeout stops the handler timeout, once the handler has returned.
func (l *lock) stopTimeout() {
	if l.timeout != nil {
		l.timeout.Stop()
	}
}

// end stops the renewals once the outcome is recorded, and frees the
// handler's context. It does not wait for a renewal in progress: that
// renewal is fenced by the token and the in-flight state, so it changes
// nothing now, and waiting for it could deadlock with a store whose single
// writer is this very request (SQLite, committing a transactional
// completion).
func (l *lock) end() {
	l.move(lockRecorded)
	if !l.e.leaseless { // a leaseless store's lock was never registered: see newLock
		l.e.renewer.remove(l)
	}
	l.ctx.stop(context.Canceled)
}

// renewed acts on the outcome err of a renewal call that ran from start to
// done: nil, ErrLockLost, or a system error. It runs without the renewer's
// mutex.
func (l *lock) renewed(err error, start, done time.Time) {
	if err == nil {
		ev := l.e.event(idemevent.Renewed, l.method, l.path, l.id.Key, l.began, done)
		ev.StoreCall, ev.StoreLatency = "renew", done.Sub(start)
		l.e.emit(l.requestContext(), &ev, slog.LevelDebug)
		return
	}
	l.mu.Lock()
	runs := l.state.handlerRuns()
	l.mu.Unlock()
	if !runs {
		return // the outcome is being recorded: Finish will learn what the store knows
	}
	e := l.e
	if errors.Is(err, ErrLockLost) {
		l.loseLease(nil)
		return
	}
	ev := e.event(idemevent.RenewError, l.method, l.path, l.id.Key, l.began, done)
	ev.Err, ev.StoreCall, ev.StoreLatency = err, "renew", done.Sub(start)
	e.emit(l.requestContext(), &ev, slog.LevelWarn)
}

// requestContext is the context of the request that holds l, for the
// events of its lease: it carries the request's trace, so they reach it.
func (l *lock) requestContext() context.Context { return l.ctx.parent }

// loseLease cancels the handler's context with ErrLeaseLost and reports it
// once: another request took the key over (err nil), or the lease ran out
// while renewals failed (err says why).
func (l *lock) loseLease(err error) {
	l.mu.Lock()
	var first bool
	if l.state, first = l.state.next(lockLeaseLost); first {
		l.ctx.stop(ErrLeaseLost)
	}
	l.mu.Unlock()
	if !first {
		return
	}
	ev := l.e.event(idemevent.LeaseLost, l.method, l.path, l.id.Key, l.began, time.Now())
	ev.Err = err
	l.e.emit(l.requestContext(), &ev, slog.LevelWarn)
}
