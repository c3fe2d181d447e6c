package idem

import (
	"errors"

	"github.com/idemkit/idemkit/core/exchange"
)

// finished is the exchange.Finished for a store call's err, made on behalf of a
// result with the given reason: nil records it (Complete, completing) or
// leaves it not recorded (Release); ErrRolledBack undoes its work;
// ErrLockLost means another run holds the key. A release keeps its reason
// whatever the store says; a completion that failed has its own.
func finished(err error, reason exchange.Reason, completing bool) exchange.Finished {
	lost, undone := errors.Is(err, ErrLockLost), errors.Is(err, ErrRolledBack)
	if completing {
		switch {
		case lost:
			reason = exchange.ReasonLockLost
		case err != nil:
			reason = exchange.ReasonStore
		}
	}
	switch {
	case undone:
		return exchange.Finished{Outcome: exchange.RolledBack, Reason: reason, Err: err}
	case lost:
		return exchange.Finished{Outcome: exchange.LockLost, Reason: reason, Err: err}
	case err == nil && completing:
		return exchange.Finished{Outcome: exchange.Recorded}
	}
	return exchange.Finished{Outcome: exchange.NotRecorded, Reason: reason, Err: err}
}
