package redisstore

import (
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
)

// TestStore runs the store contract against a single node and a Cluster.
func TestStore(t *testing.T) {
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			c := top.dial(t)
			idemtest.TestStore(t, func(tb testing.TB) idem.Store { return newStore(tb, c) })
		})
	}
}

// TestDo holds the store to what jobs, webhooks and queue consumers get
// from Engine.Do, on a single node and a Cluster.
func TestDo(t *testing.T) {
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			c := top.dial(t)
			idemtest.TestDo(t, func(tb testing.TB) idem.Store { return newStore(tb, c) })
		})
	}
}
