// Package idemsim is a deterministic simulation of idemkit: several
// Engines, each behind the net/http adapter (package idemhttp) and running
// jobs with Engine.Do for the consumers of a queue, sharing one store,
// with clients that time out, retry and hang up, a queue that delivers
// each message at least once, handlers and jobs that run longer than
// their lease, engine processes that crash, restart and freeze, and a
// store that is slow, fails, hangs and answers ambiguously.
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
//			// or, for a store whose purger runs on an idem.Clock:
//			// OpenWithClock: func(tb testing.TB, c idem.Clock) (idem.Store, func()) {...},
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
// a handler timeout or none, the TTL (24 h, or minutes, with a purger;
// in some worlds shorter than a handler may work, drawn last);
// 4 to 40 logical requests over 1 to 3 tenants and a few keys, some sent
// twice by two clients, arriving in a burst or spread out; and up to as
// many jobs (see Jobs below). The jobs are drawn last, so a seed that
// draws none runs as it did before jobs were simulated. During the
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
// lease instead, and a batch sometimes fails in part, as on a store
// spread over nodes one of which fails: the leases on that node are not
// renewed (or are, and the answer is lost), and the call returns an
// idem.PartialRenewal naming them. A store opened with its own purger on
// (Target.OpenWithClock) purges on the world's clock, between the steps
// of the simulated goroutines, beside the world's own purger; after each
// of its passes it must have set the timer of the next. After the
// chaos every engine is up, the store and clients behave, and every
// logical request keeps retrying.
//
// Two more kinds of world are drawn after everything else, so that a seed
// that draws neither runs as it did before. In some worlds without a
// handler timeout, on a store that renews in batches, a crowd comes: 260
// to 323 jobs under keys of their own, delivered at one instant to one
// engine (one that renews in batches, if any), two leases after the
// chaos, each working for a lease to a lease and a renewal interval:
// their leases, more than one RenewBatch call renews, are all due at one
// pass of the renewer, several times, on a store that answers every call.
// In some worlds an operator forgets, with force, the key of a run in
// flight, one to four times: during the chaos, and the last time within a
// lease after it, as idemctl forget -force does (the store's
// idemadmin.Store.Forget, called directly, on a store that implements
// it).
//
// This package's own tests run the memory store, with its purger on,
// twice: as it is, renewing lease by lease, and behind a wrapper that
// renews in batches, so that the Engine's renewer takes both of its paths;
// each gets half the budget.
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
// # Jobs
//
// A queue delivers each job (a message: a key, a name and a payload) at
// least once to a consumer in one of the engine processes, which runs it
// with Engine.Do and acknowledges it when Do ends with a definitive
// outcome: a result, a permanent failure (idem.Permanent), or
// ErrKeyReused. Everything else is delivered again, to any consumer, in
// any order with the other messages: after ErrInProgress, a failure, a
// panic, a store error, the end of the consumer's own context, the
// queue's visibility timeout (the first delivery may still run; some
// consumers give the job that deadline too), or the crash of the process
// running it. During the chaos the queue also hands a message to a second
// consumer at once, producers publish a message twice, or another one
// (another name, a byte more, less or changed, no payload or an empty
// one) under its key or under a request's; and a message done is
// sometimes delivered once more, its acknowledgement lost. Job keys are
// any bytes, NUL and invalid UTF-8 included, up to 400 bytes long. A job
// works in spells for up to three leases, stopping when its context is
// cancelled (the lease lost, the handler timeout, its caller gone), then
// writes its business work (Target.Effects, behind Effects.Wrap), and
// returns a result that names its run (empty, or larger than
// MaxResponseBody, sometimes), or fails, permanently or not, or panics;
// a job that starts once the chaos is over fails only permanently.
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
// contract's rule, not by idem.Record.Expired; what each store call must
// ask for (a lease of Config.Lease, an expiry of Config.TTL, from the
// engine's clock as it reads now) by the configuration the world gave the
// engines, not by what the Engine sends. A replay is recognised by
// evidence, not by its Idempotent-Replayed header: no handler ran for the
// request (the model counts every run), and the response names the run
// that wrote it (in its body, or its Location). A bug in one of those
// helpers would otherwise judge itself, and pass.
//
// Jobs are judged by the contract of idem.Job and Engine.Do (judgejobs.go):
// two jobs are the same when their names and payloads are, byte for byte;
// a delivery's outcome is its own run's (what the job returned, or its
// panic), or else the outcome recorded by the run whose record the store
// answered its Acquire with, which must have committed and served the
// same job; a result is scribbled over once judged, as its caller may.
//
// # Invariants
//
//  1. Never two executions of one key running at the same moment. An
//     execution runs from the handler's (or job's) start to its return,
//     or to its process's crash; a job runs only under the key its
//     delivery took from the store, new or taken over. This assumes what
//     a correct handler does: it stops within one renewer tick
//     (RenewEvery/4) of its context being cancelled (the model's
//     handlers and jobs take up to a tick), and the engines' clocks agree
//     (they share the virtual clock). The Engine tells a handler its lease
//     is lost at least one tick before the lease ends: a tick before the
//     end of every lease the Engine was granted (its Acquire's, moved on
//     by each renewal it was told succeeded), the run holding it, if it
//     still works, must have been told. A handler that ignores its context, or
//     whose process freezes while it runs, cannot be told in time: such
//     runs are exempt (they are documented, not bugs), and only fencing
//     protects the record from them. A run whose key an operator forgot
//     (with force) is not exempt, but another run of the key may start
//     beside it, as the operator allowed: its Engine hears of it at its
//     next renewal (idem.ErrLockLost), in a batch as lease by lease, and
//     must tell it at once, as it must whenever a renewal is refused; once
//     the chaos is over, it must have been told within a renewal interval
//     and two ticks of the forget; and its completion, refused, is never
//     replayed nor reported as recorded (invariants 3 and 7).
//  2. With transactional completion, never two committed executions per
//     record lifetime: a job's result is never followed by a second,
//     different one. The model counts an execution as committed when
//     its completion committed in the store, as transactional completion
//     makes it; a lifetime starts when Acquire creates the record. With
//     Target.Effects (the GORM store on PostgreSQL, through its Tx), each
//     handler or job run also writes a row in its transaction, and
//     after the run the rows committed must be exactly those of the runs
//     whose completion committed: no work without its stored outcome (a
//     retry would do it again), no stored outcome without its work.
//  3. Every replay is the whole response of the handler run whose
//     completion the store holds for that key and tenant: the same status
//     and body, byte for byte, and the replayed headers with all their
//     values and no others; that run served the same request (by the
//     policy's rule), its response is one the policy records, and the
//     replay is marked Idempotent-Replayed, while a response a handler
//     just wrote for the request is not. Likewise for jobs: a delivery
//     whose job ran gets what the job returned; one that did not gets the
//     result of the run whose completion the store holds, byte for byte,
//     or its permanent failure as an *idem.PermanentError with the same
//     message and no cause, never a job's result another job recorded.
//  4. A key whose holder died is free again within one lease plus the
//     renewal interval: checked a lease and a renewal interval after each
//     crash, and at every Acquire, which must never find a record held
//     past the longest lease its holder asked for.
//  5. Every logical request that keeps retrying past the faults ends with
//     a definitive answer (any status but 408, 409, 425, 429 and 5xx),
//     and every job the queue keeps delivering with a definitive outcome,
//     within a bounded time after the chaos: a key a failed job held
//     never stays locked (ErrInProgress for ever). And the Engine keeps
//     the leases its store would renew: a run is told its lease ran out
//     only if the store refused a renewal, or its own Acquire or some
//     renewal call of its process was slow or failed within the last
//     lease and renewal interval (or is still under way). The crowd
//     (above) holds the renewer to it beyond one batch: a lease left out
//     of every batch runs out on a store that answers at once. And a
//     renewal that failed is tried again at the Engine's next pass, within
//     a tick, while the run holds the key, as the documented schedule
//     says: its next store call for that lease (a renewal, or the
//     completion or release that ends it) comes no later, unless its
//     process crashed or froze since, or all 32 of its renewal workers
//     were busy (a renewal queued while a slow call is under way gets a
//     worker of its own): an Engine that waited longer would lose a
//     healthy run's lease to a store's outage shorter than the lease
//     leaves room for.
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
//     sendings of one request always do, and no job shares one with a
//     request. For jobs: ErrKeyReused exactly when the store found the key
//     held by another job (name or payload) or by a request, never for the
//     same job; ErrInProgress only while a run of the same job holds it;
//     only a result (no larger than MaxResponseBody, with a 2xx status)
//     or a permanent failure (its message, with 422) is recorded, and Do
//     asks the store to record it before it returns; nothing is recorded
//     for a failure that is not permanent or a panic, Do releases the key
//     before it returns (or goes on panicking) and returns the job's own
//     error; a job's context is cancelled only with idem.ErrLeaseLost,
//     idem.ErrHandlerTimeout or its caller's context; and when nothing
//     ran, the error is one Do documents (ErrInProgress, ErrKeyReused,
//     ErrStoreUnavailable, ErrStoreFull, or the caller's context's).
//
// Invariant 7 also holds every store call to what the configuration says,
// by the engine's clock: an Acquire taken as the clock reads now, with a
// lease of Config.Lease and an expiry of Config.TTL from then; a Complete
// at now, kept for Config.TTL; a renewal for Config.Lease from a reading of
// the clock taken since the Engine last heard back about that lease, and
// never from a later one. And a run is told its lease is lost at most a
// renewal interval before the end of the lease its Engine was granted,
// unless the store refused a renewal.
//
// Besides, every answer of the store is checked against its contract (the
// doc comments of idem.Store), on a shadow of every record kept from the
// calls that reached it, and so is the store's own purger, if it runs:
// after each of its passes, none of the records expired by then is left
// and every other is as it was; -simnocontract leaves the judgement to
// the seven invariants. A panic anywhere, or a store error with no fault injected,
// fails the run too.
package idemsim
