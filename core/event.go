package idem

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"time"
)

// EventKind names a decision or outcome of the Engine.
type EventKind uint8

// The events. Every guarded request yields exactly one decision (see
// IsDecision); a request whose handler ran then yields one of Stored or
// NotStored. While a handler runs, each renewal of its lease yields
// EventRenewed or EventRenewError, and a lease lost (taken over, or run out
// while renewals failed) EventLeaseLost.
const (
	EventFirst          EventKind = iota + 1 // new key: the handler runs
	EventTakeover                            // a crashed holder's key taken over: the handler runs
	EventReplay                              // stored response replayed
	EventConflict                            // 409: the same request is still running
	EventMismatch                            // 422: key reused with another payload
	EventKeyMissing                          // 400: no key where one is required
	EventKeyInvalid                          // 400: malformed key
	EventTooLarge                            // 413: request body over the limit
	EventBodyUnreadable                      // 400: the request body could not be read
	EventStoreError                          // the store failed (503, or pass-through when failing open)
	EventStored                              // the handler's response was stored
	EventNotStored                           // the handler's response was not stored; see Event.Reason
	EventLeaseLost                           // while the handler ran, its lease was lost: its context is cancelled
	EventRenewError                          // a lease renewal failed; it is retried while the lease lasts
	EventStoreFull                           // the store had no room for a new key: 429 store-full
	EventClientGone                          // the client went away before its key was taken: nothing ran or was recorded
	EventUnprotected                         // the store failed and, with FailOpen, the handler ran unprotected
	EventRenewed                             // a lease renewal succeeded
)

var eventNames = [...]string{
	EventFirst: "first", EventTakeover: "takeover", EventReplay: "replay",
	EventConflict: "conflict", EventMismatch: "mismatch", EventKeyMissing: "key-missing",
	EventKeyInvalid: "key-invalid", EventTooLarge: "too-large", EventBodyUnreadable: "body-unreadable", EventStoreError: "store-error",
	EventStored: "stored", EventNotStored: "not-stored", EventLeaseLost: "lease-lost",
	EventRenewError: "renew-error", EventStoreFull: "store-full", EventClientGone: "client-gone",
	EventUnprotected: "unprotected", EventRenewed: "renewed",
}

// IsDecision reports whether events of this kind are a guarded request's
// decision (exactly one per guarded request), as opposed to what became of
// a handler that ran (stored, not-stored) or of its lease while it ran
// (lease-lost, renew-error).
func (k EventKind) IsDecision() bool {
	switch k {
	case EventStored, EventNotStored, EventLeaseLost, EventRenewError, EventRenewed:
		return false
	}
	return k >= EventFirst && int(k) < len(eventNames)
}

// String returns the event's stable lower-case name, usable as a metric label.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "unknown"
}

// Reason says why a handler's response was not stored.
type Reason string

// The reasons a response is not stored.
const (
	ReasonStatus   Reason = "status"    // 5xx, 408, 409, 425 or 429
	ReasonTooLarge Reason = "too-large" // body over Config.MaxResponseBody
	ReasonStreamed Reason = "streamed"  // flushed, streamed or hijacked
	ReasonPanic    Reason = "panic"     // the handler panicked
	ReasonLockLost Reason = "lock-lost" // another request took the key over meanwhile
	ReasonStore    Reason = "store-error"
	// ReasonIncomplete: the adapter could not see the whole response, e.g. an
	// error left for a middleware that runs after idemkit to render, or a
	// body shorter or longer than its declared Content-Length.
	ReasonIncomplete Reason = "incomplete"
	// ReasonTimeoutInside: a timeout middleware registered inside idemkit
	// answered while the handler may still be running. Nothing is stored
	// and the key stays locked until its lease runs out (not released), so
	// no retry runs beside the handler within the lease; the handler's
	// context is cancelled. Register timeouts outside idemkit, or use
	// Config.HandlerTimeout.
	ReasonTimeoutInside Reason = "timeout-inside"
	// ReasonFailed: a job's function (Engine.Do) returned an error it did
	// not mark permanent: the key is released and the next delivery runs it.
	ReasonFailed Reason = "failed"
)

// Event describes one event of the Engine: a guarded request's decision,
// what became of a handler that ran, or a trouble of its lease (see
// EventKind.IsDecision). It carries no key, body or tenant: only a short
// hash of the key, so events are safe to log and count.
type Event struct {
	Kind   EventKind
	Method string
	// Route is the request path without its query.
	Route string
	// Status is the HTTP status sent, where the Engine knows it.
	Status int
	// Reason is set on EventNotStored.
	Reason Reason
	// Err is the store error on EventStoreError, EventUnprotected and
	// EventRenewError, or on EventNotStored with ReasonStore.
	Err error
	// Duration is the time from the start of the request's processing by the
	// Engine to this event: on EventStored and EventNotStored, how long the
	// request held its key.
	Duration time.Duration
	// StoreCall names the store call behind this event ("acquire",
	// "complete", "release", "renew"), or is "" when the event made none.
	StoreCall string
	// StoreLatency is the time that call took, alone.
	StoreLatency time.Duration

	key    string
	secret string // the Engine's key-hash secret (a string: an Event stays comparable)
}

// KeyHash returns 12 hex digits of an HMAC-SHA256 of the key under the
// Engine's Config.KeyHashSecret: enough to correlate log lines about one
// key, and, without the secret, no way to test a guessed key against it.
func (e *Event) KeyHash() string {
	if e.key == "" {
		return ""
	}
	m := hmac.New(sha256.New, []byte(e.secret))
	m.Write([]byte(e.key))
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0])[:6])
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
	return Event{Kind: kind, Method: method, Route: route, Duration: at.Sub(began), key: key, secret: e.keySecret}
}

// emit hands ev to the OnEvent hook and the logger, if they listen.
func (e *Engine) emit(ctx context.Context, ev *Event, level slog.Level) {
	if e.cfg.OnEvent != nil {
		e.cfg.OnEvent(ctx, *ev)
	}
	level = e.throttled(ev, level)
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
