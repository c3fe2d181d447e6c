package idem

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// EventKind names a decision or outcome of the Engine.
type EventKind uint8

// The events, one per decision. Every guarded request yields exactly one of
// the first group; a request whose handler ran then yields one of Stored or
// NotStored. While a handler runs, a failed lease renewal yields
// EventStoreError and a lease lost to another request EventLeaseLost.
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
	EventLeaseLost                           // while the handler ran, another request took the key over
)

var eventNames = [...]string{
	EventFirst: "first", EventTakeover: "takeover", EventReplay: "replay",
	EventConflict: "conflict", EventMismatch: "mismatch", EventKeyMissing: "key-missing",
	EventKeyInvalid: "key-invalid", EventTooLarge: "too-large", EventBodyUnreadable: "body-unreadable", EventStoreError: "store-error",
	EventStored: "stored", EventNotStored: "not-stored", EventLeaseLost: "lease-lost",
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
	// error left for a middleware that runs after idemkit to render.
	ReasonIncomplete Reason = "incomplete"
)

// Event describes one decision. It carries no key, body or tenant: only a
// short hash of the key, so events are safe to log and count.
type Event struct {
	Kind   EventKind
	Method string
	// Route is the request path without its query.
	Route string
	// Status is the HTTP status sent, where the Engine knows it.
	Status int
	// Reason is set on EventNotStored.
	Reason Reason
	// Err is the store error on EventStoreError, or on EventNotStored with ReasonStore.
	Err error
	// Duration is the time from the start of the request's processing by the
	// Engine to this event.
	Duration time.Duration
	// StoreLatency is the time spent in the store call behind this event.
	StoreLatency time.Duration

	key string
}

// KeyHash returns the first 12 hex digits of SHA-256 of the key: enough to
// correlate log lines about one key, useless to recover it.
func (e *Event) KeyHash() string {
	if e.key == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(e.key))
	return hex.EncodeToString(sum[:6])
}
