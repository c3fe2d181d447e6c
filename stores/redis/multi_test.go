package redisstore

import (
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
)

// TestMultiInstance: three instances, each with its own Redis client and
// Engine, behind three servers, get 200 parallel requests with one key (see
// idemtest.TestMultiInstance).
func TestMultiInstance(t *testing.T) {
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			prefix := testPrefix(t, top.dial(t))
			stores := make([]idem.Store, 3)
			for i := range stores {
				s, err := New(top.dial(t), WithPrefix(prefix))
				if err != nil {
					t.Fatal(err)
				}
				stores[i] = s
			}
			idemtest.TestMultiInstance(t, stores)
		})
	}
}
