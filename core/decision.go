package idem

import (
	"errors"
	"log/slog"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
)

// verdict is what the Engine decides for a guarded request: the policy's
// outcome, independent of how it is carried out.
type verdict struct {
	action  exchange.Action
	event   idemevent.Kind // 0 for a request that is none of idemkit's business (no key, optional)
	level   slog.Level     // of the event's log line
	problem string         // the problem to answer with; "" for a run, a pass or a replay
	replay  bool           // answer with the stored response
	status  int            // answer with this status and nothing else (no problem, no replay)
}

// decideRequest decides a request from its key and body alone, before the
// store is asked: final is false when the store must decide.
func decideRequest(keyErr, bodyErr error, keyOptional bool) (v verdict, final bool) {
	switch {
	case errors.Is(keyErr, ErrKeyMissing) && keyOptional:
		return verdict{action: exchange.Pass}, true
	case errors.Is(keyErr, ErrKeyMissing):
		return rejected(idemevent.KeyMissing, exchange.ProblemKeyMissing), true
	case keyErr != nil:
		return rejected(idemevent.KeyInvalid, exchange.ProblemKeyInvalid), true
	case errors.Is(bodyErr, ErrBodyTooLarge):
		return rejected(idemevent.TooLarge, exchange.ProblemPayloadTooLarge), true
	case bodyErr != nil:
		return rejected(idemevent.BodyUnreadable, exchange.ProblemBodyUnreadable), true
	}
	return verdict{}, false
}

func rejected(kind idemevent.Kind, problem string) verdict {
	return verdict{action: exchange.Respond, event: kind, level: slog.LevelDebug, problem: problem}
}

// decide is the policy's table for a request with a valid key and body,
// given what Store.Acquire answered: the record it found (for
// AcquireExisting), the outcome, or an error. The fingerprint is compared
// before the state, so a key reused with another payload is reported as
// such even while its first request runs.
func decide(rec *Record, outcome AcquireOutcome, err error, fp Fingerprint, failOpen bool) verdict {
	switch {
	case errors.Is(err, errClientGone):
		return verdict{action: exchange.Respond, event: idemevent.ClientGone, level: slog.LevelDebug, status: statusClientClosedRequest}
	case errors.Is(err, ErrStoreFull):
		return verdict{action: exchange.Respond, event: idemevent.StoreFull, level: slog.LevelWarn, problem: exchange.ProblemStoreFull}
	case err != nil && failOpen && !errors.Is(err, errLeftDuringFault):
		return verdict{action: exchange.Pass, event: idemevent.Unprotected, level: slog.LevelError}
	case err != nil:
		return verdict{action: exchange.Respond, event: idemevent.StoreError, level: slog.LevelError, problem: exchange.ProblemStoreUnavailable}
	case outcome == AcquireCreated:
		return verdict{action: exchange.Run, event: idemevent.First, level: slog.LevelDebug}
	case outcome == AcquireTookOver:
		return verdict{action: exchange.Run, event: idemevent.Takeover, level: slog.LevelWarn}
	case rec.Fingerprint != fp:
		return verdict{action: exchange.Respond, event: idemevent.Mismatch, level: slog.LevelDebug, problem: exchange.ProblemKeyReused}
	case rec.State != Completed:
		return verdict{action: exchange.Respond, event: idemevent.Conflict, level: slog.LevelDebug, problem: exchange.ProblemInProgress}
	}
	return verdict{action: exchange.Respond, event: idemevent.Replay, level: slog.LevelDebug, replay: true}
}

// errClientGone says that the request's context ended before its key was
// taken: its client went away (or its own deadline passed) before Acquire,
// or while the store answered it. It is no store error: the store
// answered, and nobody is left to answer. A store that did not answer
// within StoreTimeout is a store error all the same (errLeftDuringFault).
var errClientGone = errors.New("the client went away before its key was taken")

// errLeftDuringFault marks a store error met by a request whose client had
// left by the time the store failed: a fault of the store all the same
// (store-error), but, with FailOpen, nobody to run the handler for.
var errLeftDuringFault = errors.New("the client had left meanwhile")

// statusClientClosedRequest is the status a request whose client went away
// before its key was taken is answered with (as nginx logs such requests):
// nobody reads it, and nothing ran or was recorded.
const statusClientClosedRequest = 499

// detail is the detail of one of the Engine's own problems for a request
// whose key or body was refused with err.
func (e *Engine) detail(problem string, err error) string {
	h := e.cfg.HeaderName
	switch problem {
	case exchange.ProblemKeyMissing:
		return "This request requires an " + h + " header."
	case exchange.ProblemKeyInvalid:
		return err.Error()
	case exchange.ProblemBodyUnreadable:
		return "The request body could not be read."
	case exchange.ProblemStoreUnavailable:
		return "The idempotency store could not be reached, so the request was not processed. Retry later."
	case exchange.ProblemStoreFull:
		return "The idempotency store holds as many records as it may for this tenant, so no new key is accepted now. Retry later."
	case exchange.ProblemKeyReused:
		return "This " + h + " was already used with a different request (method, path or body)."
	case exchange.ProblemInProgress:
		return "A request with this " + h + " is still being processed. Retry after the Retry-After delay."
	}
	panic("idem: no detail for problem " + problem)
}
