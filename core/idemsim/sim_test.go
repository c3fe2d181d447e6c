package idemsim_test

import (
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
// module's own tests too.
var memTarget = idemsim.Target{
	Open: func(testing.TB) (idem.Store, func()) {
		s := memstore.New(memstore.WithPurgeInterval(0))
		return s, func() { _ = s.Close() }
	},
	Remote: true,
	Replay: "go test ./core/idemsim -run TestSim -seed %d -v",
}

func TestSim(t *testing.T) {
	before := runtime.NumGoroutine()
	idemsim.Run(t, memTarget, simOptions)
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
			store, done := memTarget.Open(t)
			f, st := idemsim.RunSeed(seed, store, memTarget, nil)
			done()
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
