//go:build unix

package servers

import (
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idemkit/bench/internal/httpwire"
)

// BenchmarkInProcRatio sets idemkit (memory store) beside the bare handler
// and minimal-lean in one run, in process on net/http: the three take turns
// in chunks of requests, and each chunk is timed by the CPU time the
// process used (getrusage), so that a machine shared with other work, which
// delays a chunk without making it dearer, moves the ratios far less than
// it moves separate benchmarks. It reports the ratios of the time per
// request (mem/bare, lean/bare, mem/lean) for First and, for Replay, the
// replay's cost over minimal-lean's replay and over the bare handler's
// request. Read the median over -count runs:
//
//	GOMAXPROCS=1 go test -run '^$' -bench InProcRatio -count 10 ./bench/internal/servers/
func BenchmarkInProcRatio(b *testing.B) {
	for _, w := range []string{"First", "Replay"} {
		b.Run(w, func(b *testing.B) {
			type config struct {
				kind string
				inv  Invoker
				seq  uint64
				key  []byte
				cpu  time.Duration
				n    int
			}
			var cs []*config
			for i, kind := range []string{Bare, Mem, Lean} {
				s, err := Build(Options{Framework: "nethttp", Kind: kind, MaxRecords: 1 << 30})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				c := &config{kind: kind, inv: s.Invoker(), key: make([]byte, httpwire.KeyLen)}
				httpwire.FormatKey(c.key, uint32(0xbe40+i), 0, 0)
				if c.inv.Do(c.key) != http.StatusCreated {
					b.Fatal(kind, ": the first request failed")
				}
				cs = append(cs, c)
			}
			const chunk = 200
			b.ResetTimer()
			for done := 0; done < b.N; done += chunk {
				for _, c := range cs {
					t := cpuTime()
					for range chunk {
						if w == "First" || c.kind == Bare {
							c.seq++
							httpwire.FormatKey(c.key, uint32(0xbe40), uint16(len(c.kind)), c.seq)
						}
						if st := c.inv.Do(c.key); st != http.StatusCreated {
							b.Fatalf("%s: status %d", c.kind, st)
						}
					}
					c.cpu += cpuTime() - t
					c.n += chunk
				}
			}
			per := func(c *config) float64 { return float64(c.cpu) / float64(c.n) }
			bare, mem, lean := per(cs[0]), per(cs[1]), per(cs[2])
			b.ReportMetric(mem/bare, "mem/bare")
			b.ReportMetric(lean/bare, "lean/bare")
			b.ReportMetric(mem/lean, "mem/lean")
			b.ReportMetric(mem, "mem-cpu-ns/op")
		})
	}
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkInProcFirstRatio is BenchmarkInProcRatio's First on every
// framework: idemkit (memory store) beside the same framework's bare
// handler, taking turns in chunks of requests timed by the process's CPU
// time, so that a machine shared with other work moves the ratio far less
// than it moves separate benchmarks. It reports mem/bare:
//
//	GOMAXPROCS=1 go test -run '^$' -bench InProcFirstRatio -count 8 ./bench/internal/servers/
func BenchmarkInProcFirstRatio(b *testing.B) {
	for _, fw := range Frameworks {
		b.Run(fw, func(b *testing.B) {
			var invs [2]Invoker
			var cpu [2]time.Duration
			for i, kind := range []string{Bare, Mem} {
				s, err := Build(Options{Framework: fw, Kind: kind, MaxRecords: 1 << 30})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				invs[i] = s.Invoker()
			}
			key := make([]byte, httpwire.KeyLen)
			var seq uint64
			const chunk = 200
			b.ResetTimer()
			for done := 0; done < b.N; done += chunk {
				for i, inv := range invs {
					t := cpuTime()
					for range chunk {
						seq++
						httpwire.FormatKey(key, uint32(0xbe41), uint16(i), seq)
						if st := inv.Do(key); st != http.StatusCreated {
							b.Fatalf("%s: status %d", fw, st)
						}
					}
					cpu[i] += cpuTime() - t
				}
			}
			b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "mem/bare")
		})
	}
}
