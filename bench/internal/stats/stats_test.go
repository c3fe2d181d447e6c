package stats

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name string
		in   []float64
		want float64
	}{
		{"one", []float64{3}, 3},
		{"odd unsorted", []float64{5, 1, 3}, 3},
		{"even takes the mean of the middle two", []float64{4, 1, 3, 2}, 2.5},
		{"duplicates", []float64{2, 2, 9}, 2},
		{"NaN ignored", []float64{nan, 1, 7, 4}, 4},
		{"negative", []float64{-1, -3, -2}, -2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.in)
			if got := Median(in); got != tt.want {
				t.Errorf("Median(%v) = %v, want %v", tt.in, got, tt.want)
			}
			for i := range in {
				if in[i] != tt.in[i] && !(math.IsNaN(in[i]) && math.IsNaN(tt.in[i])) {
					t.Fatalf("Median modified its input: %v, was %v", in, tt.in)
				}
			}
		})
	}
	for _, in := range [][]float64{nil, {nan, nan}} {
		if got := Median(in); !math.IsNaN(got) {
			t.Errorf("Median(%v) = %v, want NaN", in, got)
		}
	}
}

func ms(xs ...int) []time.Duration {
	d := make([]time.Duration, len(xs))
	for i, x := range xs {
		d[i] = time.Duration(x) * time.Millisecond
	}
	return d
}

func TestPercentile(t *testing.T) {
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond // 1..100 ms
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"p50 of 1..100 is the 50th sample", hundred, 50, 50 * time.Millisecond},
		{"p99 of 1..100 is the 99th sample", hundred, 99, 99 * time.Millisecond},
		{"p99.9 of 1..100 rounds the rank up", hundred, 99.9, 100 * time.Millisecond},
		{"p100 is the maximum", hundred, 100, 100 * time.Millisecond},
		{"p0 is the minimum", hundred, 0, 1 * time.Millisecond},
		{"p50 of an even count is the lower middle", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p50 of an odd count is the middle", ms(1, 2, 3), 50, 2 * time.Millisecond},
		{"p99 of few samples is the last", ms(1, 2, 3), 99, 3 * time.Millisecond},
		{"one sample", ms(7), 50, 7 * time.Millisecond},
		{"tiny p is the first sample", ms(1, 2, 3), 0.001, 1 * time.Millisecond},
		{"none", nil, 50, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("Percentile(p=%v) = %v, want %v", tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarizeSortsAndReportsMax(t *testing.T) {
	samples := ms(9, 1, 5, 3, 7, 2, 8, 4, 6, 10)
	l := Summarize(samples)
	if l.Count != 10 || l.P50 != 5*time.Millisecond || l.P99 != 10*time.Millisecond || l.Max != 10*time.Millisecond {
		t.Errorf("Summarize = %+v, want count 10, p50 5ms, p99 10ms, max 10ms", l)
	}
	if !slices.IsSorted(samples) {
		t.Errorf("samples not sorted in place: %v", samples)
	}
	if z := Summarize(nil); z != (Latencies{}) {
		t.Errorf("Summarize(nil) = %+v, want zero", z)
	}
}

func TestRatio(t *testing.T) {
	if got := Ratio(3, 4); got != 0.75 {
		t.Errorf("Ratio(3, 4) = %v", got)
	}
	for _, c := range [][2]float64{{1, 0}, {math.NaN(), 1}, {1, math.NaN()}} {
		if got := Ratio(c[0], c[1]); !math.IsNaN(got) {
			t.Errorf("Ratio(%v, %v) = %v, want NaN", c[0], c[1], got)
		}
	}
}
