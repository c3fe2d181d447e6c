package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
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
	// ErrNotRecorded: the job ran and its work stands, but its outcome
	// could not be recorded (the store failed to keep it, or it is larger
	// than Config.MaxResponseBody), so nothing guards its key: a later
	// delivery of the job runs it again. Do returns the result with it.
	ErrNotRecorded = errors.New("the job ran, but its outcome was not recorded")
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

// Do runs f at most once per key of j while the key's record lives (see
// Config.TTL: a delivery after the record expired runs f again), under the
// same lock, lease, fencing and store as the HTTP requests an Engine
// guards. The first call runs f with the lock's context (cancelled with
// ErrLeaseLost if the lease is lost; HeldKey finds the job's scope and key
// in it) and records its result; a later call with the same key and
// payload returns that result without running f; a call while another run
// holds the key returns ErrInProgress; another name or payload under the
// key returns ErrKeyReused. An error f returns is not recorded, and the key
// is released so that the next call runs f again, unless f marks it with
// Permanent. A panic in f releases the key and goes on.
//
// A job's records are apart from the requests' (see JobID): no request,
// whatever its key header, reaches a job's key, nor a job a request's.
//
// The result is recorded even if ctx ends meanwhile, as a request's
// response is. Do reports success (a result and a nil error, or a
// *PermanentError) only for an outcome that was recorded. Otherwise:
//   - ErrNotRecorded, with the result still returned: f ran and its work
//     stands, but the store failed to keep its outcome, or the result (or
//     a Permanent message) is larger than Config.MaxResponseBody, so a
//     later delivery runs f again (see docs/policy.md for what a consumer
//     should do); with Config.FailOpen, an unreachable store runs f
//     unprotected and reports the same;
//   - ErrRolledBack: with the GORM store, f's writes can commit in the
//     same transaction as its result (gormstore.Tx on a ctx given a slot
//     with gormstore.WithTxSlot); if that commit fails, or the result
//     could not be recorded, f's writes are undone and Do returns an error
//     wrapping ErrRolledBack;
//   - ErrLockLost: another run took the key over while f ran (its lease
//     ran out, as told by ErrLeaseLost), so f's result is not the key's
//     outcome and is not returned; the other run's is.
//
// Other errors: ErrKeyInvalid for a job without a key, ErrStoreUnavailable
// and ErrStoreFull (nothing ran), and ctx's error when ctx ended before the
// key was taken.
func (e *Engine) Do(ctx context.Context, j Job, f func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	if j.Key == "" {
		return nil, fmt.Errorf("idem: Do: %w: the job has no key", ErrKeyInvalid)
	}
	id := JobID(j.Scope, j.Key)
	r := exchange.Request{Method: jobMethod, Path: j.Name, Scope: id.Scope, Body: j.Payload}
	began := e.readClock()
	a := e.acquisition(id.Scope, id.Key, e.cfg.Fingerprint(r), began)
	got := e.acquire(ctx, &a, began)
	v := decide(&got.rec, got.outcome, got.err, a.Fingerprint, e.cfg.FailOpen)
	d := e.carryOut(ctx, &r, id.Key, v, nil, &a, &got, began, got.done)
	switch {
	case v.action == exchange.Run:
		return runJob(ctx, d.Lock, f)
	case v.action == exchange.Pass:
		result, err := f(ctx)
		if err != nil {
			return result, err
		}
		return result, fmt.Errorf("idem: Do: %w: the store could not be reached, and Config.FailOpen ran the job unprotected: %w",
			ErrNotRecorded, got.err)
	case v.replay:
		return jobResult(&d.Response)
	}
	return nil, jobError(ctx, v.event, got.err)
}

// jobKeyPrefix starts the key of every job's record. A request's key is
// parsed from a header (ParseKey), which refuses control characters, so
// no request can name a key that starts with NUL: requests and jobs never
// reach each other's records, whatever their scopes.
const jobKeyPrefix = "\x00job:"

// JobID returns the ID under which Engine.Do records the job of scope and
// key: the key with a prefix that no request's key can have (it starts
// with a NUL byte). Operators' tools name a job's record with it.
func JobID(scope, key string) ID { return ID{Scope: scope, Key: jobKeyPrefix + key} }

// jobMethod stands for a job where a request has its method: in its
// fingerprint, its events and its logs.
const jobMethod = "JOB"

// runJob runs f under l and records its outcome.
func runJob(ctx context.Context, l exchange.Lock, f func(ctx context.Context) ([]byte, error)) ([]byte, error) {
	defer l.AbandonOnPanic(ctx)
	result, err := f(l.Context())
	var perm *PermanentError
	switch {
	case errors.As(err, &perm):
		_, _ = l.Write([]byte(perm.Msg))
		if jerr := jobFinished(l.Finish(ctx, jobFailed, nil)); jerr != nil {
			if errors.Is(jerr, ErrNotRecorded) {
				return nil, errors.Join(jerr, err) // still f's permanent failure, but not recorded
			}
			return nil, jerr
		}
		return nil, err
	case err != nil:
		// f's own failure, whatever became of the key: its error says so.
		_ = l.Abandon(ctx, exchange.ReasonFailed)
		return nil, err
	}
	_, _ = l.Write(result)
	if jerr := jobFinished(l.Finish(ctx, jobDone, nil)); jerr != nil {
		if errors.Is(jerr, ErrNotRecorded) {
			return result, jerr // the work stands: the caller keeps its result
		}
		return nil, jerr
	}
	return result, nil
}

// jobFinished is the error Do reports for a job's outcome f, nil when it
// was recorded.
func jobFinished(f exchange.Finished) error {
	switch f.Outcome {
	case exchange.Recorded:
		return nil
	case exchange.NotRecorded:
		if f.Err != nil {
			return fmt.Errorf("idem: Do: %w (%s): %w", ErrNotRecorded, f.Reason, f.Err)
		}
		return fmt.Errorf("idem: Do: %w (%s)", ErrNotRecorded, f.Reason)
	case exchange.RolledBack:
		return fmt.Errorf("idem: Do: the job's writes were undone, as its outcome could not be recorded: %w", f.Err)
	case exchange.LockLost:
		if f.Err != nil && !errors.Is(f.Err, ErrLockLost) {
			return fmt.Errorf("idem: Do: %w: another run holds the key now; this run's result is not the key's: %w", ErrLockLost, f.Err)
		}
		return fmt.Errorf("idem: Do: %w: another run holds the key now; this run's result is not the key's", ErrLockLost)
	}
	return fmt.Errorf("idem: Do: %w: the job's lock was ended twice", ErrNotRecorded)
}

// jobResult is what a recorded outcome says. The result is the caller's
// own copy: the store's record is read-only.
func jobResult(resp *exchange.Response) ([]byte, error) {
	if resp.Status == jobFailed {
		return nil, &PermanentError{Msg: string(resp.Body)}
	}
	return bytes.Clone(resp.Body), nil
}

// jobError is the error for a decision that did not run the job.
func jobError(ctx context.Context, kind idemevent.Kind, storeErr error) error {
	switch kind {
	case idemevent.Conflict:
		return ErrInProgress
	case idemevent.Mismatch:
		return ErrKeyReused
	case idemevent.StoreFull:
		return ErrStoreFull
	case idemevent.ClientGone:
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: %w", ErrStoreUnavailable, storeErr)
}
