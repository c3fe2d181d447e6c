package idemsim_test

import (
	"context"
	"errors"
	"flag"
	"runtime"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemsim"
	"github.com/idemkit/idemkit/core/memstore"
)

var simOptions = idemsim.Flags(flag.CommandLine)

// memTarget is the memory store, reached as if over a network: the
// simulation's store wrapper never passes on idem.LocalStore, so the
// Engine gives every call a deadline, and Remote lets calls whose caller
// gave up land late, so that the Engine meets ghost writes in this
// module's own tests too. Its background purger runs, on the world's
// clock, every 30 s of virtual time, two records a batch.
var memTarget = idemsim.Target{
	OpenWithClock: func(_ testing.TB, clock idem.Clock) (idem.Store, func()) {
		s := openMem(clock)
		return s, func() { _ = s.Close() }
	},
	Remote: true,
	Replay: "go test ./core/idemsim -run TestSim/memory -seed %d -v",
}

func openMem(clock idem.Clock) *memstore.Store {
	return memstore.New(memstore.WithClock(clock), memstore.WithPurgeInterval(30*time.Second), memstore.WithPurgeBatch(2))
}

// batchTarget is the memory store renewing leases in batches
// (idem.BatchRenewer), as every durable store does: the Engine's renewer
// takes its batch path, and the simulation fails some of its batches in
// part (idem.PartialRenewal), as on a store spread over nodes.
var batchTarget = idemsim.Target{
	OpenWithClock: func(_ testing.TB, clock idem.Clock) (idem.Store, func()) {
		s := openMem(clock)
		return batchStore{s}, func() { _ = s.Close() }
	},
	Remote: true,
	Replay: "go test ./core/idemsim -run TestSim/batches -seed %d -v",
}

// batchStore renews a batch of leases in one step of the simulation, as
// one statement or script would.
type batchStore struct{ *memstore.Store }

var _ idem.BatchRenewer = batchStore{}

func (s batchStore) RenewBatch(ctx context.Context, held []idem.Held, until time.Time, lost []bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for i, h := range held {
		switch err := s.Renew(ctx, h.ID, h.Token, until); {
		case errors.Is(err, idem.ErrLockLost):
			lost[i] = true
		case err != nil:
			return err
		}
	}
	return nil
}

// TestSim runs the simulation against the memory store twice: renewing
// lease by lease, and in batches. Each gets half the budget.
func TestSim(t *testing.T) {
	before := runtime.NumGoroutine()
	half := *simOptions
	half.Budget /= 2
	for _, c := range []struct {
		name   string
		target idemsim.Target
	}{{"memory", memTarget}, {"batches", batchTarget}} {
		t.Run(c.name, func(t *testing.T) { idemsim.Run(t, c.target, &half) })
	}
	// Invariant 6 for real goroutines: every simulated one has ended.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines left after the simulation (%d before):\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// One seed always replays the same run: the same trace, step for step.
func TestSimDeterministic(t *testing.T) {
	for _, seed := range []uint64{1, 7, 2101} {
		var hashes [2]uint64
		for i := range hashes {
			f, st := idemsim.RunOne(t, seed, memTarget, nil)
			if f != nil {
				t.Fatal(f)
			}
			hashes[i] = st.TraceHash
		}
		if hashes[0] != hashes[1] {
			t.Errorf("seed %d: two runs traced differently (%x, %x)", seed, hashes[0], hashes[1])
		}
	}
}
