package redisstore

import (
	"testing"

	"github.com/idemkit/idemkit/core/idemtest"
)

// TestForgetFenced: Forget reads the record, then runs one script that
// deletes it only if it still has the state and token read; a record
// changed in between (completed, taken over, released, recreated) is left
// alone, and Forget says ErrChanged. On a single node and a Cluster.
func TestForgetFenced(t *testing.T) {
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			c := top.dial(t)
			idemtest.TestForgetFenced(t, func(tb testing.TB) idemtest.AdminStore { return newStore(tb, c) },
				func(s idemtest.AdminStore, f func()) {
					h := &testHooks{}
					h.forgetRead = func() {
						h.forgetRead = nil
						f()
					}
					s.(*Store).hooks = h
				})
		})
	}
}
