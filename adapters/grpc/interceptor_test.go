package idemgrpc_test

import (
	"testing"

	"github.com/idemkit/idemkit/adapters/grpc/internal/grpcsuite"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
)

// TestInterceptor runs the conformance suite on the memory store; the
// storetests module runs it on the GORM and Redis stores.
func TestInterceptor(t *testing.T) {
	grpcsuite.Run(t, func(tb testing.TB) idem.Store {
		s := memstore.New(memstore.WithPurgeInterval(0))
		tb.Cleanup(func() { s.Close() })
		return s
	})
}
