package idemsim_test

import (
	"flag"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemsim"
	"github.com/idemkit/idemkit/core/memstore"
)

var simOptions = idemsim.Flags(flag.CommandLine)

var memTarget = idemsim.Target{
	Open: func(testing.TB) (idem.Store, func()) {
		s := memstore.New(memstore.WithPurgeInterval(0))
		return s, func() { _ = s.Close() }
	},
	Replay: "go test ./core/idemsim -run TestSim -seed %d -v",
}

func TestSim(t *testing.T) {
	idemsim.Run(t, memTarget, simOptions)
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
