package idemtest

import (
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
)

// EventKinds returns every kind of idemevent.Event, in order, for tests that
// check that a list of them (a page of docs, the series of a metric) is
// complete. A test of the core keeps it in step with the kinds the core
// declares.
func EventKinds() []idemevent.Kind {
	var kinds []idemevent.Kind
	for k := idemevent.First; k.String() != "unknown"; k++ {
		kinds = append(kinds, k)
	}
	return kinds
}

// Reasons returns every exchange.Reason, in the order the core declares them,
// for the same tests as EventKinds.
func Reasons() []exchange.Reason {
	return []exchange.Reason{exchange.ReasonStatus, exchange.ReasonTooLarge, exchange.ReasonStreamed, exchange.ReasonPanic,
		exchange.ReasonLockLost, exchange.ReasonStore, exchange.ReasonIncomplete, exchange.ReasonTimeoutInside, exchange.ReasonFailed}
}
