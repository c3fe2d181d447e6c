//go:build !race

// Allocation counts are checked only without the race detector, which makes
// sync.Pool drop items at random; scripts/test-all runs this pass too.

package idem

import "testing"

func TestCanonicalJSONAllocs(t *testing.T) {
	docs := []struct {
		name, doc string
	}{
		{"sorted", `{"a":1,"b":[true,false,null],"c":"x"}`},
		{"unsorted", canonBenchDoc},
		{"escapes", `{"z":"\u00e9\ud83d\ude00\n","\u0061":"\/"}`},
		{"invalid", `{"a":1,}`},
	}
	for _, tt := range docs {
		t.Run(tt.name, func(t *testing.T) {
			src := []byte(tt.doc)
			dst := make([]byte, 0, 4*len(src))
			allocs := testing.AllocsPerRun(100, func() {
				dst, _ = canonicalJSON(dst[:0], src)
			})
			if allocs != 0 {
				t.Errorf("%v allocs per call, want 0", allocs)
			}
		})
	}
}
