// Package idemsim is a deterministic simulation of idemkit: several
// Engines, each behind the net/http adapter (package idemhttp), sharing one
// store, with clients that time out, retry and hang up, handlers that run
// longer than their lease, engine processes that crash, restart and
// freeze, and a store that is slow, fails, hangs and answers ambiguously.
// It checks invariants after every step of the run, on a model of what the
// handlers really did, judged by an oracle of its own written from the
// published policy, and a failure names the seed that replays it.
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
// its Go method, see idem.Clock). It moves only when no proc is ready, so a simulated day
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
// response (the connection breaks after k bytes), send a malformed or
// missing key, and sometimes retry a key with another request; handlers
// run for up to three leases, fail with 5xx, 408, 409, 425 or 429, panic,
// or write responses too large to store. A remote store (Target.Remote)
// also gets ghost writes: a call whose caller gave up (on its way, or
// stuck in the network) lands later, up to two leases later. On a store
// that renews in batches (idem.BatchRenewer), some engines renew lease by
// lease instead. After the chaos every engine is up, the store and
// clients behave, and every logical request keeps retrying.
//
// Requests are POST or PATCH, to paths with and without a query, with a
// JSON body (nested, with escapes, sometimes with members whose names
// encoding/json folds together, sometimes compressed with a
// Content-Encoding), a multipart form or other bytes. Every sending
// renders the request anew, as the policy allows: JSON members in another
// order, other whitespace and escapes, another JSON media type, a form
// with a new boundary, preamble and epilogue, the key quoted, bare, with
// parameters or whitespace. A client's mistake sends another request with
// the key: another path, method, value, number spelling, order of members
// that fold together, media type, encoding or form part. A client that
// got its answer sometimes sends the request once more; retries are
// sometimes timed to reach the Engine at the very instant the record's
// lease runs out or it expires, and the purger sometimes purges at such
// an instant. Handlers write headers the policy replays (Location, and
// Link and X-Request-Cost, listed in Config.ReplayHeaders, with several
// values) and headers it never replays (Set-Cookie, listed too; X-Trace),
// sometimes no Content-Type, sometimes a Content-Length that does not
// match their body, 204 and 303 responses; some stream their response
// (Flush) and some write it over a hijacked connection (Hijack).
//
// # The oracle
//
// The simulation judges the Engine by the published policy
// (docs/policy.md) and the store contract, written here a second time
// (oracle.go), never by the Engine's own helpers: whether two requests
// are the same is decided by decoding them (JSON with encoding/json's
// tokenizer, in member order, compared by the policy's rule; forms part
// by part), not by idem.DefaultFingerprint; what is stored by the
// policy's table, not by the Engine's own; when a record expires by the
// contract's rule, not by idem.Record.Expired. A replay is recognised by
// evidence, not by its Idempotent-Replayed header: no handler ran for the
// request (the model counts every run), and the response names the run
// that wrote it (in its body, or its Location). A bug in one of those
// helpers would otherwise judge itself, and pass.
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
//  3. Every replay is the whole response of the handler run whose
//     completion the store holds for that key and tenant: the same status
//     and body, byte for byte, and the replayed headers with all their
//     values and no others; that run served the same request (by the
//     policy's rule), its response is one the policy records, and the
//     replay is marked Idempotent-Replayed, while a response a handler
//     just wrote for the request is not.
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
//  7. Every answer and every record is what the policy says: a malformed
//     key gets 400 key-invalid (no key, key-missing), and nothing runs or
//     reaches the store for it; a key held for another request gets 422
//     key-reused, never 409, a replay or a takeover, and the same request
//     never gets 422; the Engine asks the store to record only a whole
//     response the policy records (a storable status, not streamed or
//     hijacked, within MaxResponseBody, its Content-Length, if any, that
//     of its body), as the handler wrote it, with the replayed headers
//     only; and the Engine's fingerprints tell requests apart as the
//     policy does: two requests it tells apart never share one, two
//     sendings of one request always do.
//
// Besides, every answer of the store is checked against its contract (the
// doc comments of idem.Store), on a shadow of every record kept from the
// calls that reached it; -simnocontract leaves the judgement to the seven
// invariants. A panic anywhere, or a store error with no fault injected,
// fails the run too.
package idemsim
