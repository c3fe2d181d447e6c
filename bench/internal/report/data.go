// Package report turns a benchmark run's raw figures into the user's
// markdown page, the project's page of targets and the SVG chart. It computes
// every ratio within a repetition (a configuration against the bare
// handler of the same framework measured minutes, not hours, apart) and
// reports medians over the repetitions.
package report

import (
	"slices"
	"time"

	"github.com/idemkit/idemkit/bench/internal/stats"
)

// Data is everything one run of the tool measured.
type Data struct {
	Machine Machine
	Setup   Setup
	Runs    []Run       // loopback
	InProc  []InProcRun // in process
	Scale   []ScaleRun  // 10 thousand vs many records
	Heap    []HeapFigure
	Purge   *Purge
	// Notes are remarks of the run (errors, skipped sections), printed as is.
	Notes []string
	// Before is an earlier run (the code before a change, say) whose
	// targets the page of targets shows beside this run's.
	Before *Before `json:",omitempty"`
}

// Before is an earlier run to compare with, and what it was.
type Before struct {
	Label string // what was measured: the commit, and the kind of run
	Data  *Data
}

// Machine describes where and how the run happened.
type Machine struct {
	CPUs      int
	CPU       string
	GoVersion string
	OS        string
	Command   string
	Started   time.Time
	Took      time.Duration
	// LoadStart and LoadEnd are /proc/loadavg's 1, 5 and 15 minute load
	// averages when the run began and ended: a busy machine makes every
	// figure noisier.
	LoadStart, LoadEnd string
}

// Setup records the run's parameters.
type Setup struct {
	Mode             string // "quick" or "full"
	Reps             int
	Warmup, Duration time.Duration
	Conns            []int // loopback concurrencies
	TargetConns      int   // the concurrency the targets are read at
	InProcDuration   time.Duration
	ScaleSmall       int
	ScaleBig         int
	ScaleDuration    time.Duration
	MemMaxRecords    int
	// Ablation names what was taken out of the memory-store
	// configuration ("idemkit, memory"), for analysis: see
	// internal/costfloor. Empty for idemkit as shipped.
	Ablation string `json:",omitempty"`
	// Fleet is set when the run measured the stores on a database server;
	// runs before them have none.
	Fleet *Fleet `json:",omitempty"`
}

// Fleet describes how the stores a fleet runs on (the GORM store on
// PostgreSQL, the Redis store) were measured.
type Fleet struct {
	Servers     []string // each server's name and version
	Conns       []int    // loopback concurrencies
	TargetConns int      // the concurrency the summary is read at
	Pool        int      // connections in each server's pool
}

// Run is one loopback measurement of one configuration.
type Run struct {
	Framework, Kind, Workload string
	Conns, Rep                int
	RPS                       float64
	P50, P99                  time.Duration
	AllocsPerOp, BytesPerOp   float64
	// CPUPerOp is the server process's CPU time per request, in ns: on a
	// machine shared with other work it moves far less than RPS (0 in
	// runs before it was measured, or where the platform does not say).
	CPUPerOp         float64 `json:",omitempty"`
	Status           map[int]int
	Replayed, Errors int
}

// InProcRun is one in-process measurement.
type InProcRun struct {
	Framework, Kind, Workload string
	Rep                       int
	NsPerOp                   float64
	AllocsPerOp, BytesPerOp   float64
	Status                    map[int]int
}

// ScaleRun is First on loopback against a store already holding Records.
type ScaleRun struct {
	Store   string // "mem" or "sqlite"
	Records int
	Conns   int
	Rep     int
	RPS     float64
	P50     time.Duration
	P99     time.Duration
}

// HeapFigure is the live heap a store holds per record.
type HeapFigure struct {
	Store     string
	Records   int
	PerRecord float64 // bytes: (heap after GC, filled - heap after GC, empty) / Records
	FillTime  time.Duration
}

// Purge is First at a fixed rate on the SQLite store, without and then
// during the purge of Rows expired rows by the store's purger.
type Purge struct {
	Rows         int
	Rate         float64
	Without      Latency
	During       Latency
	PurgeTook    time.Duration // until no expired row was left, or the cap
	Finished     bool          // all rows were purged within the cap
	InsertTook   time.Duration
	LateWithout  int
	LateDuring   int
	StatusDuring map[int]int
}

// Latency is a fixed-rate run's latency figures.
type Latency struct {
	Count         int
	P50, P99, Max time.Duration
}

// FromStats converts stats.Latencies.
func FromStats(l stats.Latencies) Latency {
	return Latency{Count: l.Count, P50: l.P50, P99: l.P99, Max: l.Max}
}

// cell names one loopback figure across repetitions.
type cell struct {
	fw, kind, workload string
	conns              int
}

func (r Run) cell() cell { return cell{r.Framework, r.Kind, r.Workload, r.Conns} }

// index gives the runs by cell and repetition.
type index map[cell]map[int]Run

func indexRuns(runs []Run) index {
	ix := index{}
	for _, r := range runs {
		c := r.cell()
		if ix[c] == nil {
			ix[c] = map[int]Run{}
		}
		ix[c][r.Rep] = r
	}
	return ix
}

// median returns the median over repetitions of f(run).
func (ix index) median(c cell, f func(Run) float64) float64 {
	var xs []float64
	for _, r := range ix[c] {
		xs = append(xs, f(r))
	}
	return stats.Median(xs)
}

// ratio returns the median over repetitions of f(a)/f(b), pairing the runs
// of the same repetition; NaN if no repetition has both.
func (ix index) ratio(a, b cell, f func(Run) float64) float64 {
	var xs []float64
	for rep, ra := range ix[a] {
		if rb, ok := ix[b][rep]; ok {
			xs = append(xs, stats.Ratio(f(ra), f(rb)))
		}
	}
	return stats.Median(xs)
}

func rps(r Run) float64 { return r.RPS }

// inprocIndex gives in-process runs by configuration and repetition.
type inprocKey struct{ fw, kind, workload string }

type inprocIndex map[inprocKey]map[int]InProcRun

func indexInProc(runs []InProcRun) inprocIndex {
	ix := inprocIndex{}
	for _, r := range runs {
		k := inprocKey{r.Framework, r.Kind, r.Workload}
		if ix[k] == nil {
			ix[k] = map[int]InProcRun{}
		}
		ix[k][r.Rep] = r
	}
	return ix
}

func (ix inprocIndex) median(k inprocKey, f func(InProcRun) float64) float64 {
	var xs []float64
	for _, r := range ix[k] {
		xs = append(xs, f(r))
	}
	return stats.Median(xs)
}

// ratio is the median over repetitions of ns/op of a over ns/op of b.
func (ix inprocIndex) ratio(a, b inprocKey) float64 {
	var xs []float64
	for rep, ra := range ix[a] {
		if rb, ok := ix[b][rep]; ok {
			xs = append(xs, stats.Ratio(ra.NsPerOp, rb.NsPerOp))
		}
	}
	return stats.Median(xs)
}

// scaleMedian is the median over repetitions of f for one store, size and
// concurrency.
func scaleMedian(runs []ScaleRun, store string, records, conns int, f func(ScaleRun) float64) float64 {
	var xs []float64
	for _, r := range runs {
		if r.Store == store && r.Records == records && r.Conns == conns {
			xs = append(xs, f(r))
		}
	}
	return stats.Median(xs)
}

// scaleRatio pairs the runs of the two sizes by repetition.
func scaleRatio(runs []ScaleRun, store string, big, small, conns int, f func(ScaleRun) float64) float64 {
	by := map[int]map[int]ScaleRun{}
	for _, r := range runs {
		if r.Store != store || r.Conns != conns {
			continue
		}
		if by[r.Rep] == nil {
			by[r.Rep] = map[int]ScaleRun{}
		}
		by[r.Rep][r.Records] = r
	}
	var xs []float64
	for _, m := range by {
		b, okb := m[big]
		s, oks := m[small]
		if okb && oks {
			xs = append(xs, stats.Ratio(f(b), f(s)))
		}
	}
	return stats.Median(xs)
}

// frameworksIn returns the frameworks present, in the canonical order.
func frameworksIn(order []string, has func(string) bool) []string {
	var out []string
	for _, f := range order {
		if has(f) {
			out = append(out, f)
		}
	}
	return out
}

func sortedInts(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
