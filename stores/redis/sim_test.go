package redisstore

import (
	"flag"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemsim"
)

var simOptions = idemsim.Flags(flag.CommandLine)

// TestSim runs the deterministic simulation (its regression seeds, then
// new seeds for -simtime) against the store on a single node and on a
// Cluster. Each seed gets a fresh, empty store under a prefix of its own.
func TestSim(t *testing.T) {
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			c := top.dial(t)
			idemsim.Run(t, idemsim.Target{
				Open: func(tb testing.TB) (idem.Store, func()) {
					s := newStore(tb, c)
					return s, func() { dropPrefix(tb, c, s.prefix) }
				},
				Remote: true,
				Replay: "go test ./stores/redis -run 'TestSim/" + top.name + "$' -seed %d -v",
			}, simOptions)
		})
	}
}
