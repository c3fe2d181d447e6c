package servers

import (
	"fmt"
	"runtime"
	"time"

	"github.com/idemkit/idemkit/bench/internal/httpwire"
)

// InProc is one in-process measurement.
type InProc struct {
	N           int
	NsPerOp     float64
	AllocsPerOp float64
	BytesPerOp  float64
	Status      map[int]int
}

// Measure calls inv for about d (after a warm-up of d/10) with the keys of
// workload ("First": a new key each call; "Replay": one completed key;
// "NoKey": none) and returns the cost per call. Allocations come from
// runtime.MemStats, read before and after, as testing.B does.
func Measure(inv Invoker, workload string, d time.Duration, prefix uint32) (InProc, error) {
	key := make([]byte, httpwire.KeyLen)
	var seq uint64
	next := func() []byte {
		switch workload {
		case "NoKey":
			return nil
		case "Replay":
			httpwire.FormatKey(key, prefix, 0xffff, 0)
		default:
			httpwire.FormatKey(key, prefix, 0, seq)
			seq++
		}
		return key
	}
	switch workload {
	case "First", "NoKey":
	case "Replay":
		if status := inv.Do(next()); status >= 300 {
			return InProc{}, fmt.Errorf("servers: priming the replayed key: status %d", status)
		}
	default:
		return InProc{}, fmt.Errorf("servers: no in-process workload %q", workload)
	}
	status := map[int]int{}
	loop := func(d time.Duration) (int, time.Duration) {
		start := time.Now()
		n := 0
		for {
			// Read the clock every 64 calls: a call costs microseconds.
			for range 64 {
				status[inv.Do(next())]++
			}
			n += 64
			if el := time.Since(start); el >= d {
				return n, el
			}
		}
	}
	loop(d / 10)
	clear(status)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n, el := loop(d)
	runtime.ReadMemStats(&after)
	return InProc{
		N:           n,
		NsPerOp:     float64(el.Nanoseconds()) / float64(n),
		AllocsPerOp: float64(after.Mallocs-before.Mallocs) / float64(n),
		BytesPerOp:  float64(after.TotalAlloc-before.TotalAlloc) / float64(n),
		Status:      status,
	}, nil
}
