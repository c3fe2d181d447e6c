package idemsim

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// Target is a store for the simulation to run against.
type Target struct {
	// Open returns a new, empty store for one run (one seed), and a
	// function that disposes of it, or nil. The store's own background
	// work (a purger) must be off: the simulation purges by itself, at
	// virtual times. Open fails tb if it cannot make a store.
	Open func(tb testing.TB) (idem.Store, func())
	// OpenWithClock, if set, is used instead of Open: it opens the store
	// with its own background purger on, running on clock, the world's
	// virtual time (e.g. memstore.WithClock and WithPurgeInterval). The
	// clock's timers run between the steps of the simulated goroutines,
	// and are the passes of the purger: after each, the simulation checks
	// that the store holds none of the records expired by then and every
	// other as it was. The world's own purger runs too. Run and RunOne use
	// it; RunSeed is for stores opened with Open.
	OpenWithClock func(tb testing.TB, clock idem.Clock) (idem.Store, func())
	// Remote says the store is reached over a network: a call whose caller
	// gave up may still land on it later (a ghost write), as a statement
	// a database server received goes on running after its client left,
	// or one stuck in the network arrives after all.
	Remote bool
	// Replay is the command line that replays one seed against this
	// target, with %d where the seed goes, e.g.
	// "go test ./core/idemsim -run TestSim -seed %d -v".
	Replay string
	// Effects, if set, gives the handlers business work of their own,
	// written through the store's transactional completion: then
	// invariant 2 is also checked on what the database really committed.
	Effects *Effects
}

// Effects is the handlers' and jobs' business work for a store with
// transactional completion (the GORM store's Tx): each handler run, and
// each run of a job under Engine.Do, writes one row in its transaction,
// which the store's Complete commits with the stored outcome, and Release
// or a failed completion rolls back. After
// each run the simulation compares the rows committed with the
// completions committed: a run's work is committed if and only if its
// outcome was stored. Every failure the simulation injects into a
// Complete is reported to the Engine as idem.ErrRolledBack, as such a
// store reports its own.
type Effects struct {
	// Wrap wraps each engine's HTTP handler (the idempotency middleware
	// around the application), e.g. to install the request's transaction
	// slot (gormstore.TxMiddleware). A consumer runs each job's Do behind
	// it too, as the handler of a request that carries the delivery's
	// context, so that the job finds the same slot.
	Wrap func(http.Handler) http.Handler
	// Write does the work of run execution (a handler's or a job's) in its
	// transaction; ctx is the handler's or the job's context.
	Write func(ctx context.Context, execution int) error
	// Committed returns the handler runs whose work is committed.
	Committed func() ([]int, error)
}

// Counter is an optional capability of a store under simulation: the
// number of records it holds, expired ones included until purged (-1 if
// it cannot tell). After each run the simulation checks it against the
// keys used, and finds zero once every record has expired and been purged.
type Counter interface {
	Len() int
}

// Options say which seeds to run.
type Options struct {
	// Seed, if not zero, is the only seed run (a replay).
	Seed uint64
	// Budget is how long Run spends on seeds 1, 2, 3, ... after the
	// regression seeds; at least one seed runs. Under -short, only the
	// regression seeds run.
	Budget time.Duration
	// Start is the first seed of the budget (default 1).
	Start uint64
	// Trace, if set, receives every line of every run's trace.
	Trace io.Writer
	// NoContract turns off the check of every store answer against the
	// store contract, leaving only invariants 1 to 7 to judge a run.
	NoContract bool
}

// Flags defines the simulation's flags on fs and returns the Options they
// set: -seed N (replay one seed), -simtime (the budget, default
// $IDEMKIT_SIMTIME or 2s), -simstart, -simtrace (print every run's whole
// trace) and -simnocontract. Call it once per test binary, from a test
// file:
//
//	var simOptions = idemsim.Flags(flag.CommandLine)
func Flags(fs *flag.FlagSet) *Options {
	o := &Options{Budget: 2 * time.Second}
	if d, err := time.ParseDuration(os.Getenv("IDEMKIT_SIMTIME")); err == nil {
		o.Budget = d
	}
	fs.Uint64Var(&o.Seed, "seed", 0, "idemsim: run only this seed")
	fs.DurationVar(&o.Budget, "simtime", o.Budget, "idemsim: time spent on seeds per store, after the regression seeds (default $IDEMKIT_SIMTIME)")
	fs.Uint64Var(&o.Start, "simstart", 1, "idemsim: first seed of the budget")
	fs.BoolFunc("simtrace", "idemsim: print every run's whole trace to stdout", func(s string) error {
		if s != "false" && s != "0" {
			o.Trace = os.Stdout
		}
		return nil
	})
	fs.BoolVar(&o.NoContract, "simnocontract", false, "idemsim: do not check store answers against the store contract")
	return o
}

// Failure is an invariant violated in one run.
type Failure struct {
	Seed      uint64
	Step      int           // the scheduler's step during which it was found
	At        time.Duration // virtual time since the run began
	Invariant string
	Message   string
	Params    string   // the world the seed drew
	Trace     []string // the last events before it
	Replay    string   // the command line that replays the seed
}

// Error implements error: the whole report.
func (f *Failure) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "idemsim: seed %d, step %d (+%.3fs): invariant %s violated:\n\t%s\n", f.Seed, f.Step, f.At.Seconds(), f.Invariant, f.Message)
	fmt.Fprintf(&b, "world: %s\nlast events:\n", f.Params)
	for _, l := range f.Trace {
		fmt.Fprintf(&b, "\t%s\n", l)
	}
	if f.Replay != "" {
		fmt.Fprintf(&b, "replay: %s", f.Replay)
	}
	return b.String()
}

// Stats counts what runs did.
type Stats struct {
	Seeds      int
	Steps      int
	Requests   int // logical requests
	Attempts   int // requests sent
	Jobs       int // messages the queue delivers, at least once
	Deliveries int // deliveries of those messages to a consumer
	Executions int // handler and job runs
	Crashes    int
	Virtual    time.Duration // simulated time
	TraceHash  uint64        // of the last run's trace: equal for two runs of one seed
}

func (s *Stats) add(o Stats) {
	s.Seeds += o.Seeds
	s.Steps += o.Steps
	s.Requests += o.Requests
	s.Attempts += o.Attempts
	s.Jobs += o.Jobs
	s.Deliveries += o.Deliveries
	s.Executions += o.Executions
	s.Crashes += o.Crashes
	s.Virtual += o.Virtual
	s.TraceHash = o.TraceHash
}

func (s Stats) String() string {
	return fmt.Sprintf("%d seeds, %d steps, %d logical requests, %d attempts, %d jobs, %d deliveries, %d handler and job runs, %d crashes, %s simulated",
		s.Seeds, s.Steps, s.Requests, s.Attempts, s.Jobs, s.Deliveries, s.Executions, s.Crashes, s.Virtual.Round(time.Second))
}

// RunSeed simulates one seed against store, which must be new and empty
// (opened with target.Open), and returns the run's first violation (nil
// if none) and what it did.
func RunSeed(seed uint64, store idem.Store, target Target, o *Options) (*Failure, Stats) {
	return runSeed(seed, store, nil, target, o)
}

// RunOne opens a store for target (with OpenWithClock if it is set, with
// Open otherwise), simulates one seed against it as RunSeed does, and
// disposes of it.
func RunOne(tb testing.TB, seed uint64, target Target, o *Options) (*Failure, Stats) {
	tb.Helper()
	store, clock, done := target.open(tb)
	if done != nil {
		defer done()
	}
	return runSeed(seed, store, clock, target, o)
}

// open opens a store for one run; clock is the store's, if it has one.
func (t Target) open(tb testing.TB) (store idem.Store, clock *storeClock, done func()) {
	if t.OpenWithClock != nil {
		clock = new(storeClock)
		store, done = t.OpenWithClock(tb, clock)
		return store, clock, done
	}
	store, done = t.Open(tb)
	return store, nil, done
}

func runSeed(seed uint64, store idem.Store, clock *storeClock, target Target, o *Options) (*Failure, Stats) {
	if o == nil {
		o = &Options{}
	}
	w := newWorld(seed, store, target.Remote, !o.NoContract)
	if clock != nil {
		clock.bind(w)
	}
	w.effects = target.Effects
	w.trace.all = o.Trace
	f := w.run()
	st := Stats{Seeds: 1, Steps: w.s.steps, Requests: len(w.reqs) - w.p.jobs - w.p.crowd, Attempts: len(w.attempts), Jobs: w.p.jobs + w.p.crowd,
		Deliveries: w.deliveries, Executions: len(w.m.execs), Crashes: w.p.crashes, Virtual: w.idleAt.Sub(epoch),
		TraceHash: w.trace.hash.Sum64()}
	if f != nil && target.Replay != "" {
		f.Replay = fmt.Sprintf(target.Replay, seed)
	}
	return f, st
}

// Run simulates target: the committed regression seeds, then seeds from
// o.Start for o.Budget (or only o.Seed). It fails t at the first
// violation, printing the seed, the step, the invariant, the last events
// and the command line that replays it.
func Run(t *testing.T, target Target, o *Options) Stats {
	t.Helper()
	if o == nil {
		o = &Options{Budget: 2 * time.Second}
	}
	var total Stats
	one := func(seed uint64) bool {
		f, st := RunOne(t, seed, target, o)
		total.add(st)
		if f != nil {
			t.Error(f.Error())
			return false
		}
		return true
	}
	if o.Seed != 0 {
		one(o.Seed)
		t.Logf("idemsim: seed %d: %s", o.Seed, total)
		return total
	}
	for _, seed := range regressionSeeds {
		if !one(seed) {
			return total
		}
	}
	regressions := total.Seeds
	// The same seed twice must give the same run, step for step: a store
	// that reads a clock or draws at random, or a goroutine that escapes
	// the scheduler, would make a failing seed impossible to replay.
	var hashes [2]uint64
	for i := range hashes {
		_, st := RunOne(t, max(o.Start, 1), target, &Options{NoContract: o.NoContract})
		hashes[i] = st.TraceHash
	}
	if hashes[0] != hashes[1] {
		t.Errorf("idemsim: seed %d ran differently twice (trace hashes %x and %x): the store or the simulation is not "+
			"deterministic (does the store read a clock, draw at random, or answer from a goroutine of its own?); "+
			"compare the traces of two runs with -simtrace=1", max(o.Start, 1), hashes[0], hashes[1])
		return total
	}
	if !testing.Short() {
		begin := time.Now()
		start := max(o.Start, 1)
		for seed := start; seed == start || time.Since(begin) < o.Budget; seed++ {
			if !one(seed) {
				break
			}
		}
	}
	t.Logf("idemsim: %s (%d regression seeds, then seeds from %d)", total, regressions, max(o.Start, 1))
	return total
}
