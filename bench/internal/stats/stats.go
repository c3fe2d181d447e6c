// Package stats holds the few statistics the load benchmark reports: the
// median over repetitions and latency percentiles over one run's samples.
package stats

import (
	"math"
	"slices"
	"time"
)

// Median returns the median of xs (the mean of the two middle values for an
// even count), or NaN for none. xs is not modified. NaN values are ignored,
// so a repetition that could not compute a figure does not shift the others.
func Median(xs []float64) float64 {
	s := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Percentile returns the p-th percentile (0 <= p <= 100) of sorted, which
// must be in increasing order, by the nearest-rank method: the smallest
// sample such that at least p percent of the samples are at or below it.
// Nearest rank always returns a latency that was really observed, which is
// what a reader of "p99 = 2 ms" expects. It returns 0 for no samples.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	switch {
	case p <= 0:
		return sorted[0]
	case p >= 100:
		return sorted[n-1]
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

// Latencies summarises one run's latency samples.
type Latencies struct {
	Count         int
	P50, P99, Max time.Duration
}

// Summarize sorts samples in place and returns their percentiles.
func Summarize(samples []time.Duration) Latencies {
	slices.Sort(samples)
	l := Latencies{Count: len(samples), P50: Percentile(samples, 50), P99: Percentile(samples, 99)}
	if len(samples) > 0 {
		l.Max = samples[len(samples)-1]
	}
	return l
}

// Ratio returns a/b, or NaN when b is zero or either is NaN: a missing
// baseline must show as missing, never as an infinite speed-up.
func Ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}
