package idemfiber_test

import (
	"testing"

	"github.com/idemkit/idemkit/adapters/internal/fasthttpcore/fibertest"
)

// The benchmarks are those of the suite both Fiber adapters run, on
// Fiber v3: each idemkit path beside the same handler alone.
//
//	go test -run XXX -bench . -benchmem ./adapters/fiberv3/

func BenchmarkMiddleware(b *testing.B) { fibertest.BenchmarkMiddleware(b, adapter) }
func BenchmarkConflict(b *testing.B)   { fibertest.BenchmarkConflict(b, adapter) }
