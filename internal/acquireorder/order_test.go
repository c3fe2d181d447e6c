package acquireorder

import "testing"

func TestOrderFollowsWhatAcquisitionsFind(t *testing.T) {
	var o Order
	if o.ReadFirst() {
		t.Fatal("a new Order reads first; want the write first, as for new keys")
	}
	o.Saw(true)
	if !o.ReadFirst() {
		t.Fatal("after a live record found, still writes first")
	}
	for range 3 * Bound {
		o.Saw(true)
	}
	// A storm of retries leaned it as far as Bound: as many writes turn it.
	for i := range Bound {
		if !o.ReadFirst() {
			t.Fatalf("turned to write first after %d writes, want %d", i, Bound)
		}
		o.Saw(false)
	}
	if o.ReadFirst() {
		t.Fatalf("still reads first after %d writes", Bound)
	}
	for range 3 * Bound {
		o.Saw(false)
	}
	for i := range Bound {
		if o.ReadFirst() {
			t.Fatalf("turned to read first after %d live records, want %d", i, Bound+1)
		}
		o.Saw(true)
	}
	o.Saw(true)
	if !o.ReadFirst() {
		t.Fatalf("still writes first after %d live records", Bound+1)
	}
}
