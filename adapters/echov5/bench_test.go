package idemecho_test

import (
	"testing"

	"github.com/idemkit/idemkit/adapters/internal/echocore/echotest"
)

// The benchmark is that of the suite both Echo adapters run, on Echo v5:
// each idemkit path beside the same handler alone.
//
//	go test -run XXX -bench . -benchmem ./adapters/echov5/
func BenchmarkMiddleware(b *testing.B) { echotest.BenchmarkMiddleware(b, adapter) }
