package idem

import "errors"

// Errors callers branch on. Everything else an Engine or Store returns wraps
// one of these with %w, or is a system error passed up from the store.
var (
	// ErrKeyMissing: a guarded request carried no idempotency key and keys are required.
	ErrKeyMissing = errors.New("idempotency key missing")
	// ErrKeyInvalid: the key header is not a valid key (see ParseKey).
	ErrKeyInvalid = errors.New("idempotency key invalid")
	// ErrBodyTooLarge: the request body exceeds Config.MaxRequestBody.
	ErrBodyTooLarge = errors.New("request body too large")
	// ErrNotFound: Store.Get found no record for the ID.
	ErrNotFound = errors.New("idempotency record not found")
	// ErrLockLost: the token no longer holds the in-flight record (it was taken
	// over after its lease ran out, completed, released or purged).
	ErrLockLost = errors.New("idempotency lock lost")
	// ErrStoreFull: a bounded store has no room for another record.
	ErrStoreFull = errors.New("idempotency store full")
	// ErrRolledBack: Store.Complete failed and took the handler's own
	// writes down with it (they were part of the store's transaction), so
	// the response the handler wrote describes work that did not happen.
	// Lock.Finish passes it on; adapters then withhold that response (see
	// abortResponse) and the client's retry runs the handler again.
	ErrRolledBack = errors.New("the handler's writes were rolled back with the failed completion")
	// ErrLeaseLost is the cause (context.Cause) with which the Engine
	// cancels a running handler's context once its lease on the key is
	// lost, or about to run out because renewals failed: another request
	// may run the key's handler from then on, so this one must stop and not
	// commit its work.
	ErrLeaseLost = errors.New("idempotency lease lost: another request may now run this key's handler")
	// ErrHandlerTimeout is the cause with which the Engine cancels a
	// handler's context after Config.HandlerTimeout.
	ErrHandlerTimeout = errors.New("idempotency handler timeout")
)
