package idemsim

// regressionSeeds always run, before the budget's seeds, against every
// target: each once made the simulation find an invariant violated. A seed
// draws its world through this package's code, so a seed found with one
// version of the simulation may draw another world with the next: when
// the simulation changes how it draws, find each defect's seed again (undo
// its fix in a scratch copy and run the budget) and replace it here.
var regressionSeeds = []uint64{
	// Invariant 1: the renewer told a handler its lease was lost at the
	// first pass within one tick of the lease's end, which could come just
	// before the end; a handler that took most of a tick to stop still ran
	// when a retry took the key over. Fixed by telling it at least one
	// tick before (core: the renewer's guard is two ticks). This seed
	// finds it on a job's run, which a redelivery takes over.
	780,
	// Invariant 1: an Acquire answered after the lease it took was (nearly)
	// over, a retry had meanwhile taken the key over, and both handlers
	// ran. Fixed in core: such a request gets 503 (a job,
	// ErrStoreUnavailable) and its record is released.
	338,
	// Invariant 1, on remote stores (found on GORM with PostgreSQL and on
	// Redis, found again on the memory store reached as a remote one): a
	// renewal that timed out at the Engine landed after a newer one and
	// moved the lease back, so another instance took the key over while
	// the handler, told nothing, still ran. Fixed in the store contract: a
	// lease never moves back (Renew/NeverShortens in idemtest.TestStore).
	// With the contract check on, the store contract catches it first;
	// without it, this seed finds it on a job's run.
	125,
}
