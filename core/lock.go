package idem

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Lock is held by the one request that runs the handler for a key. The
// in-flight record in the store, with its lease, is the lock; no mutex or
// transaction is held while the handler runs. While held, the lease is
// renewed every Config.RenewEvery by the Engine's renewer (see renewer.go),
// so a slow handler keeps its key and a crashed process loses it
// within one lease.
//
// The adapter copies the response body into the Lock with Write as the
// handler writes it, then ends the Lock exactly once with Finish or Abandon.
// A Lock must not be used after it ends.
type Lock struct {
	e      *Engine
	method string
	path   string
	id     ID
	token  string
	began  time.Time

	body     []byte
	bodyBuf  *[]byte // pooled backing of body, returned when the lock ends
	overflow bool

	ended atomic.Bool
	lost  atomic.Bool // another request took the key over: renewing is pointless

	// Guarded by the renewer's mutex.
	renewAt    time.Time
	prev, next *Lock
}

func (e *Engine) newLock(r *Request, a Acquire, began time.Time) *Lock {
	l := &Lock{e: e, method: r.Method, path: r.Path, id: a.ID, token: a.Token, began: began}
	e.renewer.add(l, began.Add(e.cfg.RenewEvery))
	return l
}

// Write keeps a copy of p as part of the response body to store. It always
// succeeds; past Config.MaxResponseBody it stops copying and the response
// will not be stored.
func (l *Lock) Write(p []byte) (int, error) {
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

// HeaderReader reads response headers; http.Header satisfies it.
type HeaderReader interface {
	Values(key string) []string
}

// Finish ends the Lock after the handler wrote a complete response with this
// status and these headers. A storable response is recorded for replay;
// any other releases the key at once so a retry runs the handler again. The
// store is written even if ctx was cancelled meanwhile (the client may have
// gone; its retry still deserves the replay).
// It returns the store's error, if any, for callers that care; adapters
// may ignore it, as it is also reported through the Engine's events.
func (l *Lock) Finish(ctx context.Context, status int, header HeaderReader) error {
	if !l.end() {
		return nil
	}
	ctx = detach(ctx)
	switch {
	case !Storable(status):
		return l.release(ctx, ReasonStatus, status)
	case l.overflow:
		return l.release(ctx, ReasonTooLarge, status)
	}
	// The store copies what it keeps, so the captured body is lent to it and
	// recycled once Complete returns.
	resp := Response{Status: status, Header: l.e.storedHeader(header), Body: l.body}
	if resp.Body == nil {
		resp.Body = []byte{}
	}
	now := l.e.cfg.Now()
	start := now
	if !l.e.realClock {
		start = time.Now()
	}
	err := l.e.cfg.Store.Complete(ctx, l.id, l.token, Completion{
		Response:    resp,
		CompletedAt: now,
		ExpiresAt:   now.Add(l.e.cfg.TTL),
	})
	l.recycleBody()
	done := time.Now()
	ev := l.e.event(EventStored, l.method, l.path, l.id.Key, l.began, done)
	ev.Status, ev.StoreLatency = status, done.Sub(start)
	switch {
	case err == nil:
		l.e.emit(ctx, &ev, slog.LevelDebug)
	case errors.Is(err, ErrLockLost):
		ev.Kind, ev.Reason = EventNotStored, ReasonLockLost
		l.e.emit(ctx, &ev, slog.LevelWarn)
	default:
		ev.Kind, ev.Reason, ev.Err = EventNotStored, ReasonStore, err
		l.e.emit(ctx, &ev, slog.LevelError)
		// The record may still be in flight: free it now rather than after
		// its lease. If the store is down this fails too, and the lease
		// frees the key later.
		_ = l.e.cfg.Store.Release(ctx, l.id, l.token)
	}
	return err
}

// Abandon ends the Lock without storing anything: the handler panicked, or
// its response was streamed, hijacked or otherwise not captured whole. The
// key is released at once so a retry runs the handler again.
func (l *Lock) Abandon(ctx context.Context, reason Reason) error {
	if !l.end() {
		return nil
	}
	return l.release(detach(ctx), reason, 0)
}

// detach keeps ctx's values but not its cancellation: the outcome of a
// request that ran must be recorded even if its client has gone.
func detach(ctx context.Context) context.Context {
	if ctx.Done() == nil {
		return ctx // cannot be cancelled anyway
	}
	return context.WithoutCancel(ctx)
}

func (l *Lock) release(ctx context.Context, reason Reason, status int) error {
	l.recycleBody()
	start := time.Now()
	err := l.e.cfg.Store.Release(ctx, l.id, l.token)
	done := time.Now()
	ev := l.e.event(EventNotStored, l.method, l.path, l.id.Key, l.began, done)
	ev.Status, ev.Reason, ev.StoreLatency = status, reason, done.Sub(start)
	level := slog.LevelDebug
	if err != nil && !errors.Is(err, ErrLockLost) {
		ev.Err, level = err, slog.LevelError
	}
	l.e.emit(ctx, &ev, level)
	if errors.Is(err, ErrLockLost) {
		return nil // someone else holds or finished the key: nothing of ours to free
	}
	return err
}

var captureBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func (l *Lock) recycleBody() {
	if l.bodyBuf != nil && cap(l.body) <= 64<<10 {
		*l.bodyBuf = l.body[:0]
		captureBufs.Put(l.bodyBuf)
	}
	l.body, l.bodyBuf = nil, nil
}

// end stops the renewals and reports whether this call was the first to
// end the Lock. It does not wait for a renewal in progress: that renewal
// is fenced by the token and the in-flight state, so once the record is
// completed, released or taken over it changes nothing, and waiting for it
// could deadlock with a store whose single writer is this very request
// (SQLite, holding the transaction that Complete is about to commit).
func (l *Lock) end() bool {
	if !l.ended.CompareAndSwap(false, true) {
		return false
	}
	l.e.renewer.remove(l)
	return true
}

// renew moves the lease on; the renewer calls it when it is due. No mutex
// is held across the store call or the event hooks.
func (l *Lock) renew() {
	if l.ended.Load() || l.lost.Load() {
		return
	}
	e := l.e
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewEvery)
	start := time.Now()
	err := e.cfg.Store.Renew(ctx, l.id, l.token, e.cfg.Now().Add(e.cfg.Lease))
	done := time.Now()
	cancel()
	if err == nil || l.ended.Load() {
		return // the request has finished meanwhile: what the renewal found no longer matters
	}
	kind := EventStoreError // a transient failure is retried at the next renewal while the lease lasts
	if errors.Is(err, ErrLockLost) {
		// Another request took the key over; Finish will find out and
		// store nothing.
		l.lost.Store(true)
		kind, err = EventLeaseLost, nil
	}
	ev := e.event(kind, l.method, l.path, l.id.Key, l.began, done)
	ev.Err, ev.StoreLatency = err, done.Sub(start)
	e.emit(context.Background(), &ev, slog.LevelWarn)
}

// storedHeader lists the replayable headers. The values are the handler's
// own: the store copies them in Complete.
func (e *Engine) storedHeader(h HeaderReader) []HeaderField {
	if h == nil {
		return nil
	}
	var fields [8]HeaderField // enough for the usual few, on the stack
	found := fields[:0]
	hh, direct := h.(http.Header) // names are canonical already: skip Values' canonicalisation
	for _, name := range e.replayHeaders {
		var vs []string
		if direct {
			vs = hh[name]
		} else {
			vs = h.Values(name)
		}
		if len(vs) > 0 {
			found = append(found, HeaderField{Name: name, Values: vs})
		}
	}
	if len(found) == 0 {
		return nil
	}
	return slices.Clone(found)
}

// event starts an Event for a request that began at began, as of at.
func (e *Engine) event(kind EventKind, method, path, key string, began, at time.Time) Event {
	route := path
	for i := 0; i < len(route); i++ {
		if route[i] == '?' {
			route = route[:i]
			break
		}
	}
	return Event{Kind: kind, Method: method, Route: route, Duration: at.Sub(began), key: key}
}

// emit hands ev to the OnEvent hook and the logger, if they listen.
func (e *Engine) emit(ctx context.Context, ev *Event, level slog.Level) {
	if e.cfg.OnEvent != nil {
		e.cfg.OnEvent(ctx, *ev)
	}
	if !e.cfg.Logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs,
		slog.String("event", ev.Kind.String()),
		slog.String("method", ev.Method),
		slog.String("route", ev.Route),
		slog.Duration("duration", ev.Duration))
	if ev.key != "" {
		attrs = append(attrs, slog.String("key_hash", ev.KeyHash()))
	}
	if ev.Status != 0 {
		attrs = append(attrs, slog.Int("status", ev.Status))
	}
	if ev.Reason != "" {
		attrs = append(attrs, slog.String("reason", string(ev.Reason)))
	}
	if ev.Err != nil {
		attrs = append(attrs, slog.String("error", ev.Err.Error()))
	}
	e.cfg.Logger.LogAttrs(ctx, level, "idempotency", attrs...)
}
