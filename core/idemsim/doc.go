// Package idemsim is a deterministic simulation of idemkit: several
// Engines, each behind the net/http adapter (package idemhttp), sharing one
// store, with clients that time out, retry and hang up, handlers that run
// longer than their lease, engine processes that crash, restart and
// freeze, and a store that is slow, fails, hangs and answers ambiguously.
// It checks invariants after every step of the run, on a model of what the
// handlers really did, and a failure names the seed that replays it.
//
// Store authors run it against their store the way they run
// idemtest.TestStore:
//
//	var simOptions = idemsim.Flags(flag.CommandLine)
//
//	func TestSim(t *testing.T) {
//		idemsim.Run(t, idemsim.Target{
//			Open: func(tb testing.TB) (idem.Store, func()) {
//				s := newEmptyStore(tb) // its background purger off
//				return s, func() { s.Close() }
//			},
//			Remote: true, // reached over a network
//			Replay: "go test ./mystore -run TestSim -seed %d -v",
//		}, simOptions)
//	}
//
// Run runs the committed regression seeds, checks that one seed replays
// alike twice, then runs seeds 1, 2, 3, ... for the budget (-simtime,
// default $IDEMKIT_SIMTIME or 2s). `-seed N -v` replays one seed,
// `-simtrace` prints its whole trace.
//
// # Determinism
//
// Every goroutine of the simulated world is a proc of one scheduler, which
// runs exactly one at a time, in an order drawn from the seed; a proc runs
// until it blocks on the scheduler (a sleep, a store call's latency, a
// wait for a context or a response). Time is virtual: the Engines' clock
// (idem.Config.Clock) reads it, their timers fire as procs when it reaches
// them, and their renewal goroutines start as procs (the clock is an
// idem.Spawner). It moves only when no proc is ready, so a simulated day
// takes milliseconds and nothing depends on the host's speed. A store call
// reaches the store in one step, at one instant of virtual time: a real
// database answers the same sequence of calls the same way, so one seed
// replays one run, step for step (TestSimDeterministic).
//
// # The world
//
// A seed draws the world: 1 to 4 engines; the lease (10 to 60 s), the
// renewal interval, the store deadline (sometimes longer than the lease),
// a handler timeout or none, the TTL (24 h, or minutes, with a purger);
// 4 to 40 logical requests over 1 to 3 tenants and a few keys, some sent
// twice by two clients, arriving in a burst or spread out. During the
// chaos (1 to 8 minutes), engines crash (every lock of the process
// vanishes, its handlers stop, its store calls never land) and restart,
// freeze (a garbage-collection pause or a stopped VM: their handlers,
// renewals and timers stand still, then go on), store calls get latency
// (some longer than the lease), fail before or after they commit, hang
// until their deadline, in spells that hit the whole store or one
// engine's network; clients give up early, hang up in the middle of a
// response (the connection breaks after k bytes), and sometimes retry a
// key with another body; handlers run for up to three leases, fail with
// 5xx, 409 or 429, panic, or write responses too large to store. A
// remote store (Target.Remote) also gets ghost writes: a call whose caller
// gave up lands later. After the chaos every engine is up, the store and
// clients behave, and every logical request keeps retrying.
//
// # Invariants
//
//  1. Never two executions of one key running at the same moment. An
//     execution runs from the handler's start to its return, or to its
//     process's crash. This assumes what a correct handler does: it stops
//     within one renewer tick (RenewEvery/4) of its context being
//     cancelled (the model's handlers take up to a tick), and the
//     engines' clocks agree (they share the virtual clock). The Engine
//     tells a handler its lease is lost at least one tick before the lease
//     ends. A handler that ignores its context, or whose process freezes
//     while it runs, cannot be told in time: such runs are exempt (they
//     are documented, not bugs), and only fencing protects the record
//     from them.
//  2. With transactional completion, never two committed executions per
//     record lifetime. The model counts an execution as committed when
//     its completion committed in the store, as transactional completion
//     makes it; a lifetime starts when Acquire creates the record. With
//     Target.Effects (the GORM store on PostgreSQL, through its Tx), each
//     handler run also writes a row in the request's transaction, and
//     after the run the rows committed must be exactly those of the runs
//     whose completion committed: no work without its stored response (a
//     retry would do it again), no stored response without its work.
//  3. Every replay is byte-identical (status, content type, body) to one
//     whole response a handler produced for that key, tenant and
//     fingerprint; never another key's, another tenant's, a cut one, or a
//     status that is never stored.
//  4. A key whose holder died is free again within one lease plus the
//     renewal interval: checked a lease and a renewal interval after each
//     crash, and at every Acquire, which must never find a record held
//     past the longest lease its holder asked for.
//  5. Every logical request that keeps retrying past the faults ends with
//     a definitive answer (any status but 408, 409, 425, 429 and 5xx),
//     within a bounded time after the chaos.
//  6. After the run: no proc left and no timer pending (every Engine's
//     renewer idle), at most one record per key used, and none once every
//     record has expired and been purged.
//
// Besides, every answer of the store is checked against its contract (the
// doc comments of idem.Store), on a shadow of every record kept from the
// calls that reached it; -simnocontract leaves the judgement to the six
// invariants. A panic anywhere, or a store error with no fault injected,
// fails the run too.
package idemsim
