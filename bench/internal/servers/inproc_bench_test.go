package servers

import (
	"net/http"
	"testing"

	"github.com/idemkit/idemkit/bench/internal/httpwire"
)

// BenchmarkInProc calls the net/http handler chains in process, as
// loadbench's in-process section does: the bare handler, idemkit on the
// memory store and minimal-lean, on a new key per request (First) and on
// one completed key (Replay; the bare handler cannot tell a retry from a
// first request). Interleave the configurations with -count and compare
// medians (idemkit/minimal-lean, idemkit/bare):
//
//	GOMAXPROCS=1 go test -run '^$' -bench InProc -benchmem -count 10 ./bench/internal/servers/
func BenchmarkInProc(b *testing.B) {
	for _, kind := range []string{Bare, Mem, Lean} {
		for _, w := range []string{"First", "Replay"} {
			if kind == Bare && w == "Replay" {
				continue
			}
			b.Run(kind+"/"+w, func(b *testing.B) {
				s, err := Build(Options{Framework: "nethttp", Kind: kind, MaxRecords: 1 << 30})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				inv := s.Invoker()
				key := make([]byte, httpwire.KeyLen)
				httpwire.FormatKey(key, 0xbe4c, 0, 0)
				if inv.Do(key) != http.StatusCreated {
					b.Fatal("first request failed")
				}
				b.ReportAllocs()
				for i := uint64(1); b.Loop(); i++ {
					if w == "First" {
						httpwire.FormatKey(key, 0xbe4c, 0, i)
					}
					if st := inv.Do(key); st != http.StatusCreated {
						b.Fatalf("status %d", st)
					}
				}
			})
		}
	}
}
