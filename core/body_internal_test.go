package idem

import (
	"strings"
	"testing"
)

// Defect: readBody sized its buffer from the declared Content-Length, so
// clients announcing 1 MiB and sending nothing made the server hold 1 MiB
// each (200 of them: ~200 MiB).
func TestReadBodyGrowsAsBytesArrive(t *testing.T) {
	body, err := readBody(strings.NewReader(`{"a":1}`), 1<<20, 1<<20)
	if err != nil || string(body) != `{"a":1}` {
		t.Fatalf("readBody = %q, %v", body, err)
	}
	if cap(body) > 4096 {
		t.Fatalf("buffer of %d bytes for a 7-byte body that declared 1 MiB; it must grow with what arrives", cap(body))
	}
	long := strings.Repeat("x", 300_000)
	body, err = readBody(strings.NewReader(long), int64(len(long)), 1<<20)
	if err != nil || string(body) != long {
		t.Fatalf("a 300 kB body read back as %d bytes, %v", len(body), err)
	}
}
