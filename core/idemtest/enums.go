package idemtest

import idem "github.com/idemkit/idemkit/core"

// EventKinds returns every kind of idem.Event, in order, for tests that
// check that a list of them (a page of docs, the series of a metric) is
// complete. A test of the core keeps it in step with the kinds the core
// declares.
func EventKinds() []idem.EventKind {
	var kinds []idem.EventKind
	for k := idem.EventFirst; k.String() != "unknown"; k++ {
		kinds = append(kinds, k)
	}
	return kinds
}

// Reasons returns every idem.Reason, in the order the core declares them,
// for the same tests as EventKinds.
func Reasons() []idem.Reason {
	return []idem.Reason{idem.ReasonStatus, idem.ReasonTooLarge, idem.ReasonStreamed, idem.ReasonPanic,
		idem.ReasonLockLost, idem.ReasonStore, idem.ReasonIncomplete, idem.ReasonTimeoutInside, idem.ReasonFailed}
}
