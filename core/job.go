package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
)

// Job is a piece of work that is not an HTTP request (a queued message, a
// webhook's event, a scheduled task) and that must take effect once per
// key, however often it is delivered: see Engine.Do.
type Job struct {
	// Scope is the tenant the key belongs to ("" for a single global one).
	Scope string
	// Key identifies the work, e.g. a message or event id. Any non-empty
	// bytes; keys are compared exactly.
	Key string
	// Name is the operation, e.g. "settle-charge": with Payload, it makes
	// the job's fingerprint, as the method and path do a request's.
	Name string
	// Payload is what the work is done on. A later job with the same key
	// and another name or payload is refused with ErrKeyReused.
	Payload []byte
}

// The outcomes of Engine.Do that callers branch on.
var (
	// ErrInProgress: another run holds the job's key and has not finished
	// (or its process died and its lease has not run out yet). Nothing ran:
	// deliver the job again later (for a queue, do not acknowledge it).
	ErrInProgress = errors.New("idempotency key in progress: another run holds it")
	// ErrKeyReused: the job's key was used with another name or payload.
	// Nothing ran, and retrying will not help.
	ErrKeyReused = errors.New("idempotency key reused with another payload")
	// ErrStoreUnavailable: the store could not be reached (or answered
	// too late), so nothing ran. Deliver the job again later.
	ErrStoreUnavailable = errors.New("idempotency store unavailable")
)

// Permanent marks an error returned by a job's function as the job's
// outcome: it is recorded like a result, and every later run of the key
// returns it (as a *PermanentError) without running the function. Any
// other error is not recorded: the key is released and the next delivery
// runs the function again.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Msg: err.Error(), err: err}
}

// PermanentError is a job's recorded failure (see Permanent). A replay
// carries only its message.
type PermanentError struct {
	Msg string
	err error // the function's own error, on the run that made it
}

// Error returns the recorded message.
func (e *PermanentError) Error() string { return e.Msg }

// Unwrap returns the function's own error on the run that returned it,
// and nil on a replay.
func (e *PermanentError) Unwrap() error { return e.err }

// The statuses a job's outcome is recorded with.
const (
	jobDone   = 200
	jobFailed = 422
)

// Do runs f at most once per key of j, under the same lock, lease, fencing
// and store as the HTTP requests an Engine guards: the first call runs f
// with the lock's context (cancelled with ErrLeaseLost if the lease is
// lost; HeldKey finds the key in it) and records its result; a later call
// with the same key and payload returns that result without running f; a
// call while another run holds the key returns ErrInProgress; another
// name or payload under the key returns ErrKeyReused. An error f returns
// is not recorded, and the key is released so that the next call runs f
// again, unless f marks it with Permanent. A panic in f releases the key
// and goes on. A result larger than Config.MaxResponseBody is returned but
// not recorded.
//
// The result is recorded even if ctx ends meanwhile, as a request's
// response is. With the GORM store, f's writes can commit in the same
// transaction as its result (gormstore.Tx on a ctx given a slot with
// gormstore.WithTxSlot): then, if that commit fails, Do returns an error
// wrapping ErrRolledBack, and f's work did not happen.
//
// Other errors: ErrStoreUnavailable and ErrStoreFull (nothing ran), and
// ctx's error when ctx ended before the key was taken. With
// Config.FailOpen, an unreachable store runs f unprotected.
func (e *Engine) Do(ctx context.Context, j Job, f func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	if j.Key == "" {
		return nil, fmt.Errorf("idem: Do: %w: the job has no key", ErrKeyInvalid)
	}
	r := Request{Method: jobMethod, Path: j.Name, Scope: j.Scope, Body: j.Payload}
	began := elapsed(e.epoch)
	a, start := e.acquisition(j.Scope, j.Key, e.cfg.Fingerprint(r))
	got := e.acquire(ctx, &a, start)
	v := decide(&got.rec, got.outcome, got.err, a.Fingerprint, e.cfg.FailOpen)
	d := e.carryOut(ctx, &r, j.Key, v, nil, &a, &got, began, got.done)
	switch {
	case v.action == ActionRun:
		return runJob(ctx, d.Lock, f)
	case v.action == ActionPass:
		return f(ctx)
	case v.replay:
		return jobResult(&d.Response)
	}
	return nil, jobError(ctx, v.event, got.err)
}

// jobMethod stands for a job where a request has its method: in its
// fingerprint, its events and its logs.
const jobMethod = "JOB"

// runJob runs f under l and records its outcome.
func runJob(ctx context.Context, l *Lock, f func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	defer l.AbandonOnPanic(ctx)
	result, err := f(l.Context())
	var perm *PermanentError
	switch {
	case errors.As(err, &perm):
		_, _ = l.Write([]byte(perm.Msg))
		if ferr := l.Finish(ctx, jobFailed, nil); errors.Is(ferr, ErrRolledBack) {
			return nil, ferr
		}
		return nil, err
	case err != nil:
		_ = l.Abandon(ctx, ReasonFailed)
		return nil, err
	}
	_, _ = l.Write(result)
	if ferr := l.Finish(ctx, jobDone, nil); errors.Is(ferr, ErrRolledBack) {
		return nil, ferr
	}
	return result, nil
}

// jobResult is what a recorded outcome says. The result is the caller's
// own copy: the store's record is read-only.
func jobResult(resp *Response) ([]byte, error) {
	if resp.Status == jobFailed {
		return nil, &PermanentError{Msg: string(resp.Body)}
	}
	return bytes.Clone(resp.Body), nil
}

// jobError is the error for a decision that did not run the job.
func jobError(ctx context.Context, kind EventKind, storeErr error) error {
	switch kind {
	case EventConflict:
		return ErrInProgress
	case EventMismatch:
		return ErrKeyReused
	case EventStoreFull:
		return ErrStoreFull
	case EventClientGone:
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: %w", ErrStoreUnavailable, storeErr)
}
