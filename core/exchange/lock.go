package exchange

import (
	"context"
	"net/http"
)

// Lock is held by the one request that runs the handler for a key (the
// Decision of a Run holds it): the in-flight record in the store, with its
// lease, is the lock; no mutex or transaction is held while the handler
// runs. The Engine renews the lease while the handler runs and until its
// outcome is recorded, so a slow handler or a slow completion keeps its
// key, and a crashed process loses it within one lease.
//
// The handler must run with Context as its request context. The adapter
// copies the response body into the Lock with Write as the handler writes
// it, then ends the Lock exactly once with Finish or Abandon (or
// LeaveRunning), and acts on what they report. A Lock must not be used
// after it ends. The Engine implements it; adapters only use it.
type Lock interface {
	// Context returns the context the handler must run with: the request's
	// context given to Begin, cancelled with cause idem.ErrLeaseLost as
	// soon as the Engine knows the lease is lost (or about to run out
	// because renewals failed), and with idem.ErrHandlerTimeout after
	// Config.HandlerTimeout. idem.HeldKey finds the key and owner token in
	// it.
	Context() context.Context

	// Write keeps a copy of p as part of the response body to store.
	// Adapters pass every byte the handler writes, whether or not the
	// client accepted it, so that the stored body is the handler's
	// response, whole. It always succeeds; past Config.MaxResponseBody it
	// stops copying and the response will not be stored.
	Write(p []byte) (int, error)

	// HeaderSent keeps the replayable headers of h as they are now, when
	// the response's header goes out: what the client got is what a replay
	// gives, not the header as a handler left it afterwards (net/http
	// sends nothing a handler sets after WriteHeader). Only the first call
	// counts, and Finish then takes the headers from it rather than from
	// its header argument. ResponseCapture calls it.
	HeaderSent(h http.Header)

	// Finish ends the Lock after the handler wrote a complete response
	// with this status and these headers. A storable response (Storable)
	// is recorded for replay; any other releases the key at once so a
	// retry runs the handler again. The store is written even if ctx was
	// cancelled meanwhile (the client may have gone; its retry still
	// deserves the replay), within Config.StoreTimeout, and the lease is
	// renewed until the store has answered.
	//
	// It reports what became of the response: the adapter must act on it,
	// and withhold a response whose work was rolled back or whose key
	// another request holds (Finished.Withhold). A Lock's second end
	// reports the zero Finished.
	Finish(ctx context.Context, status int, header HeaderReader) Finished

	// Abandon ends the Lock without storing anything: the handler
	// panicked, or its response was streamed, hijacked or otherwise not
	// captured whole. The key is released at once so a retry runs the
	// handler again. It reports what became of the response, as Finish
	// does.
	Abandon(ctx context.Context, reason Reason) Finished

	// AbandonOnPanic, deferred by an adapter around the handler it runs
	// under the Lock, abandons it as a panic and lets the panic go on to
	// the framework's recovery (or net/http's), which decides what the
	// client sees.
	AbandonOnPanic(ctx context.Context)

	// LeaveRunning ends the Lock for a handler that a timeout middleware
	// registered inside idemkit (named by middleware) gave up on and left
	// running on a goroutine of its own, having answered status for it:
	// nothing is stored, and the key is not released at once, which would
	// let a retry run beside the handler, but left locked for one lease
	// (Config.Lease), no longer renewed. Retries meanwhile get 409. The
	// handler's context is cancelled with idem.ErrLeaseLost, and an error
	// is logged: register the timeout before idemkit, or use
	// Config.HandlerTimeout. ResponseCapture.End does this for the
	// adapters built on net/http; an adapter that finds such a handler by
	// its framework's means calls it instead of Finish.
	LeaveRunning(ctx context.Context, status int, middleware string)

	// HandlerMayRun reports whether the Lock ended while its handler may
	// still be running (LeaveRunning): an adapter must then leave the
	// request and the framework's context as that goroutine may still be
	// using them. It may be called after the Lock ended, from the
	// goroutine that ended it.
	HandlerMayRun() bool
}

// HeaderReader reads response headers; http.Header satisfies it. A
// HeaderReader may also have a method AppendValues(dst []string, name
// string) []string, which appends a header's values to dst instead of
// returning a slice of its own: Finish then gathers the replayable headers
// without an allocation per header, for frameworks whose headers are not
// kept as []string (fasthttp's). The values it appends need only stay valid
// until Finish returns, since the store copies what it keeps.
type HeaderReader interface {
	Values(key string) []string
}

// HeaderAppender is a HeaderReader with AppendValues (see HeaderReader):
// the optional capability Lock.Finish looks for.
type HeaderAppender interface {
	HeaderReader
	AppendValues(dst []string, name string) []string
}

// Outcome is what became of the result a Lock ended with: the one thing
// every entry point (the HTTP adapters, the gRPC interceptor, Engine.Do)
// must turn into what its caller sees. docs/policy.md has the table of
// what each entry point does with each; the rule behind it is that no
// entry point reports success for a result that was not recorded, unless
// the result's work stands and the policy says it is sent unrecorded.
type Outcome uint8

const (
	// Recorded: the result is stored, and every retry of the key gets it
	// replayed. The one outcome that is the key's for good.
	Recorded Outcome = iota + 1
	// NotRecorded: nothing is stored and the key is free (or will be once
	// its lease runs out, if the store could not be told), so a retry runs
	// the work again. The work itself stands: it ran, and nothing undid
	// it. Finished.Reason says why: the policy does not store such a
	// result (a 5xx, a body over the limit, a streamed response, a failed
	// job), or the store failed to keep it (ReasonStore).
	NotRecorded
	// RolledBack: nothing is stored, and the work's writes in the store's
	// transaction (gormstore.Tx) were undone with it, so the result
	// describes work that did not happen. It must not reach the caller as
	// a success: an HTTP adapter withholds the response, the gRPC
	// interceptor answers UNAVAILABLE, Do returns ErrRolledBack.
	RolledBack
	// LockLost: another run holds the key now (it took the key over after
	// this one's lease ran out, or an operator forgot the record), so this
	// result is not the key's and is not stored. It must not reach the
	// caller as the key's outcome either: a retry gets the other run's.
	LockLost
)

var outcomeNames = [...]string{Recorded: "recorded", NotRecorded: "not-recorded", RolledBack: "rolled-back", LockLost: "lock-lost"}

// String returns the outcome's name.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) && outcomeNames[o] != "" {
		return outcomeNames[o]
	}
	return "unknown"
}

// Finished is what Lock.Finish and Lock.Abandon report: the Outcome, why
// the result was not recorded, and the store's error behind it, if any.
type Finished struct {
	Outcome Outcome
	// Reason says why the result was not recorded; "" when it was.
	Reason Reason
	// Err is the store's error that decided the outcome (a failed
	// completion or release), or nil.
	Err error
}

// Withhold reports whether the result must not reach the caller as it
// is: its work was rolled back, or it is not the key's outcome (LockLost),
// unless the result itself reports a failure that asks for a retry (a
// status the policy never records, Reason ReasonStatus), which may go out
// as it is. An adapter that can still replace the response answers
// Engine.WithheldResponse instead; one whose response may be under way
// breaks it off.
func (f Finished) Withhold() bool {
	return (f.Outcome == RolledBack || f.Outcome == LockLost) && f.Reason != ReasonStatus
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
