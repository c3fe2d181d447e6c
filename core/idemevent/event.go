// Package idemevent describes what an idem.Engine reports as it works:
// each guarded request's decision, what became of a handler that ran, and
// the troubles of its lease (Event). Config.OnEvent receives every event,
// and the Engine logs one line per event; package
// observability/otel turns them into metrics and spans.
package idemevent

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/idemkit/idemkit/core/exchange"
)

// Kind names a decision or outcome of the Engine.
type Kind uint8

// The events. Every guarded request yields exactly one decision (see
// IsDecision); a request whose handler ran then yields one of Stored or
// NotStored. While a handler runs, each renewal of its lease yields
// Renewed or RenewError, and a lease lost (taken over, or run out
// while renewals failed) LeaseLost.
const (
	First          Kind = iota + 1 // new key: the handler runs
	Takeover                       // a crashed holder's key taken over: the handler runs
	Replay                         // stored response replayed
	Conflict                       // 409: the same request is still running
	Mismatch                       // 422: key reused with another payload
	KeyMissing                     // 400: no key where one is required
	KeyInvalid                     // 400: malformed key
	TooLarge                       // 413: request body over the limit
	BodyUnreadable                 // 400: the request body could not be read
	StoreError                     // the store failed (503, or pass-through when failing open)
	Stored                         // the handler's response was stored
	NotStored                      // the handler's response was not stored; see Event.Reason
	LeaseLost                      // while the handler ran, its lease was lost: its context is cancelled
	RenewError                     // a lease renewal failed; it is retried while the lease lasts
	StoreFull                      // the store had no room for a new key: 429 store-full
	ClientGone                     // the client went away before its key was taken: nothing ran or was recorded
	Unprotected                    // the store failed and, with FailOpen, the handler ran unprotected
	Renewed                        // a lease renewal succeeded
)

var eventNames = [...]string{
	First: "first", Takeover: "takeover", Replay: "replay",
	Conflict: "conflict", Mismatch: "mismatch", KeyMissing: "key-missing",
	KeyInvalid: "key-invalid", TooLarge: "too-large", BodyUnreadable: "body-unreadable", StoreError: "store-error",
	Stored: "stored", NotStored: "not-stored", LeaseLost: "lease-lost",
	RenewError: "renew-error", StoreFull: "store-full", ClientGone: "client-gone",
	Unprotected: "unprotected", Renewed: "renewed",
}

// IsDecision reports whether events of this kind are a guarded request's
// decision (exactly one per guarded request), as opposed to what became of
// a handler that ran (stored, not-stored) or of its lease while it ran
// (lease-lost, renew-error).
func (k Kind) IsDecision() bool {
	switch k {
	case Stored, NotStored, LeaseLost, RenewError, Renewed:
		return false
	}
	return k >= First && int(k) < len(eventNames)
}

// String returns the event's stable lower-case name, usable as a metric label.
func (k Kind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "unknown"
}

// Event describes one event of the Engine: a guarded request's decision,
// what became of a handler that ran, or a trouble of its lease (see
// Kind.IsDecision). It carries no key, body or tenant: only a short
// hash of the key, so events are safe to log and count.
type Event struct {
	Kind   Kind
	Method string
	// Route is the request path without its query.
	Route string
	// Status is the HTTP status sent, where the Engine knows it.
	Status int
	// Reason is set on NotStored.
	Reason exchange.Reason
	// Err is the store error on StoreError, Unprotected and
	// RenewError, or on NotStored with ReasonStore.
	Err error
	// Duration is the time from the start of the request's processing by the
	// Engine to this event: on Stored and NotStored, how long the
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

// New returns an Event of kind about key: the Engine makes its events with
// it, and KeyHash hashes key under secret (the Engine's
// Config.KeyHashSecret). The key itself is never shown.
func New(kind Kind, key, secret string) Event {
	return Event{Kind: kind, key: key, secret: secret}
}
