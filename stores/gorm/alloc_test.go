//go:build !race

// Allocation counts are checked without the race detector, as in the core;
// scripts/test-all runs this pass too.

package gormstore

import (
	"testing"

	"github.com/idemkit/idemkit/core/exchange"
)

func TestHeaderDecodeAllocs(t *testing.T) {
	enc := appendHeader(nil, []exchange.HeaderField{
		{Name: "Content-Type", Values: []string{"application/json"}},
		{Name: "Location", Values: []string{"/v1/charges/ch_1"}},
		{Name: "Link", Values: []string{"</a>; rel=a", "</b>; rel=b"}},
	})
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := decodeHeader(enc); err != nil {
			t.Fatal(err)
		}
	})
	// One string for the whole column, one array of fields, one of values.
	if allocs > 3 {
		t.Fatalf("decodeHeader allocates %v times, want at most 3", allocs)
	}
}
