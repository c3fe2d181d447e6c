package idem

import "errors"

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

// finished is the Finished for a store call's err, made on behalf of a
// result with the given reason: nil records it (Complete, completing) or
// leaves it not recorded (Release); ErrRolledBack undoes its work;
// ErrLockLost means another run holds the key. A release keeps its reason
// whatever the store says; a completion that failed has its own.
func finished(err error, reason Reason, completing bool) Finished {
	lost, undone := errors.Is(err, ErrLockLost), errors.Is(err, ErrRolledBack)
	if completing {
		switch {
		case lost:
			reason = ReasonLockLost
		case err != nil:
			reason = ReasonStore
		}
	}
	switch {
	case undone:
		return Finished{Outcome: RolledBack, Reason: reason, Err: err}
	case lost:
		return Finished{Outcome: LockLost, Reason: reason, Err: err}
	case err == nil && completing:
		return Finished{Outcome: Recorded}
	}
	return Finished{Outcome: NotRecorded, Reason: reason, Err: err}
}
