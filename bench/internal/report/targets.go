package report

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"
)

// Target is one of the project's performance targets, with what the run
// measured.
type Target struct {
	Target   string // the target as stated
	Where    string // framework or path it applies to
	Measured string
	// Met is nil when the run did not measure it.
	Met *bool
}

func verdict(ok bool) *bool { return &ok }

// Targets evaluates the project's performance targets against d.
// Loopback targets are read at d.Setup.TargetConns connections.
func Targets(d *Data) []Target {
	var ts []Target
	ix := indexRuns(d.Runs)
	c := d.Setup.TargetConns
	fws := frameworksIn(FrameworkOrder, func(f string) bool { return len(ix[cell{f, "bare", "First", c}]) > 0 })
	at := fmt.Sprintf(" (loopback, %d connections)", c)

	ratioTarget := func(name, workload, kind string, min float64) {
		for _, fw := range fws {
			r := ix.ratio(cell{fw, kind, workload, c}, cell{fw, "bare", workload, c}, rps)
			ts = append(ts, ratioRow(name+at, FrameworkNames[fw], r, min, true))
		}
	}
	ratioTarget("First ≥ 0.90× bare", "First", "mem", 0.90)
	ratioTarget("Mix ≥ 0.90× bare", "Mix", "mem", 0.90)
	ratioTarget("Replay ≥ 1.0× bare", "Replay", "mem", 1.0)
	// idemkit against minimal-lean, the hand-written floor (net/http).
	for _, w := range []string{"First", "Mix", "Replay"} {
		a, b := cell{"nethttp", "mem", w, c}, cell{"nethttp", "lean", w, c}
		if r := ix.ratio(a, b, rps); !math.IsNaN(r) {
			t := ratioRow(w+" ≥ 0.95× minimal-lean"+at, FrameworkNames["nethttp"], r, 0.95, true)
			if x := ix.ratio(b, a, cpuOp); !math.IsNaN(x) && x > 0 {
				t.Measured += fmt.Sprintf(" (by the server's CPU per request: %.2f)", x)
			}
			ts = append(ts, t)
		}
	}
	// idemkit against each Fiber's own idempotency middleware. On Fiber v3,
	// the goal it was added with: ahead on Mix, within 10% on First.
	for _, b := range []struct {
		fw         string
		mix, first float64
	}{{"fiber", 1.25, 1.0}, {"fiberv3", 1.0, 1.0}} {
		if len(ix[cell{b.fw, "builtin", "Mix", c}]) == 0 {
			continue
		}
		for _, w := range []struct {
			workload string
			min      float64
		}{{"Mix", b.mix}, {"First", b.first}} {
			r := ix.ratio(cell{b.fw, "mem", w.workload, c}, cell{b.fw, "builtin", w.workload, c}, rps)
			ts = append(ts, ratioRow(fmt.Sprintf("%s: %s ≥ %.2f× the built-in's throughput%s",
				FrameworkNames[b.fw], w.workload, w.min, at), FrameworkNames[b.fw], r, w.min, true))
		}
	}

	ip := indexInProc(d.InProc)
	for _, fw := range FrameworkOrder {
		if r := ip.ratio(inprocKey{fw, "mem", "First"}, inprocKey{fw, "bare", "First"}); !math.IsNaN(r) {
			ts = append(ts, ratioRow("in-process First ≤ 1.4× bare", FrameworkNames[fw], r, 1.4, false))
		}
	}
	for _, fw := range FrameworkOrder {
		if r := ip.ratio(inprocKey{fw, "mem", "NoKey"}, inprocKey{fw, "bare", "NoKey"}); !math.IsNaN(r) {
			ts = append(ts, ratioRow("no-key 400 no dearer than the bare handler (in process)", FrameworkNames[fw], r, 1.0, false))
		}
	}

	big, small := d.Setup.ScaleBig, d.Setup.ScaleSmall
	for _, h := range d.Heap {
		if h.Store == "mem" && h.Records == big {
			ts = append(ts, Target{
				Target:   "memory store ≤ 300 B of live heap per record (150-byte response)",
				Where:    fmt.Sprintf("memory, %s records", count(h.Records)),
				Measured: fmt.Sprintf("%.0f B", h.PerRecord),
				Met:      verdict(h.PerRecord <= 300),
			})
		}
	}
	// The p50 is read at one connection: one request at a time, it is the
	// cost of a request; with several, it also depends on how the server's
	// scheduler takes turns between connections. Throughput at the target
	// concurrency is shown beside it.
	for _, store := range []string{"mem", "sqlite"} {
		r := scaleRatio(d.Scale, store, big, small, 1, p50)
		if math.IsNaN(r) {
			continue
		}
		n := d.Setup.TargetConns
		t := Target{
			Target: fmt.Sprintf("First's p50 within 20%% from %s to %s records (1 connection)", count(small), count(big)),
			Where:  StoreNames[store],
			Measured: fmt.Sprintf("%.2f× (%s → %s; at %d connections, req/s %s → %s)", r,
				dur(scaleMedian(d.Scale, store, small, 1, p50)), dur(scaleMedian(d.Scale, store, big, 1, p50)), n,
				thousands(scaleMedian(d.Scale, store, small, n, scaleRPS)), thousands(scaleMedian(d.Scale, store, big, n, scaleRPS))),
		}
		if store == "mem" { // the target names the memory store; SQLite is shown for reference
			t.Met = verdict(r <= 1.2)
		}
		if big < 1_000_000 {
			t.Where += " (not the target's 1 million)"
		}
		ts = append(ts, t)
	}
	for _, fw := range fws {
		if r := ix.ratio(cell{fw, "sqlite", "First", c}, cell{fw, "insert", "First", c}, rps); !math.IsNaN(r) {
			ts = append(ts, ratioRow("SQLite store First ≥ 0.5× one plain INSERT"+at, FrameworkNames[fw], r, 0.5, true))
		}
	}
	// The transactional completion on SQLite, at every concurrency measured.
	for _, n := range sortedInts(conns(ix, "nethttp", "sqlitetx")) {
		a, b := cell{"nethttp", "sqlitetx", "First", n}, cell{"nethttp", "insert", "First", n}
		if r := ix.ratio(a, b, rps); !math.IsNaN(r) {
			t := ratioRow(fmt.Sprintf("SQLite store, transactional completion, First ≥ 0.7× the handler's INSERT alone (loopback, %d connections)", n),
				FrameworkNames["nethttp"], r, 0.7, true)
			t.Measured += fmt.Sprintf(" (%s vs %s req/s)", thousands(ix.median(a, rps)), thousands(ix.median(b, rps)))
			ts = append(ts, t)
		}
	}
	ts = append(ts, fleetTargets(ix)...)
	if ir := ip.ratio(inprocKey{"nethttp", "sqlite", "First"}, inprocKey{"nethttp", "insert", "First"}); !math.IsNaN(ir) {
		ts = append(ts, Target{
			Target: "SQLite store First against one plain INSERT (in process, for reference)",
			Where:  "net/http",
			Measured: fmt.Sprintf("%.2f× the time (%s vs %s)", ir,
				dur(ip.median(inprocKey{"nethttp", "sqlite", "First"}, nsOp)),
				dur(ip.median(inprocKey{"nethttp", "insert", "First"}, nsOp))),
		})
	}
	if p := d.Purge; p != nil {
		r := float64(p.During.P99) / float64(p.Without.P99)
		t := Target{
			Target: "p99 during a purge ≤ 2× without",
			Where:  fmt.Sprintf("SQLite, %s expired rows, First at %.0f/s", count(p.Rows), p.Rate),
			Measured: fmt.Sprintf("%.2f× (%s → %s, max %s)", r, durT(p.Without.P99), durT(p.During.P99),
				durT(p.During.Max)),
			Met: verdict(r <= 2),
		}
		if p.Rows < 1_000_000 {
			t.Where += " (not the target's 1 million)"
		}
		if !p.Finished {
			t.Measured += fmt.Sprintf("; purge unfinished after %s", durT(p.PurgeTook))
		}
		ts = append(ts, t)
	}
	ts = append(ts, Target{
		Target:   "default memory store capacity stated for a 24 h TTL at a realistic rate",
		Where:    "README store table",
		Measured: "documentation, not measured here",
	})
	return ts
}

// fleetTargets are the targets of the stores a fleet runs on, against
// their one-statement baselines, at each concurrency measured: First and
// Replay held to a bound, Mix shown beside them. A run that measured no
// such store lists the targets as not measured (the runs before there
// were any, say), so that the page of targets always names them.
func fleetTargets(ix index) []Target {
	var ts []Target
	for _, f := range FleetStores {
		conns := conns(ix, fleetFramework, f.Kind)
		for _, w := range fleetWorkloads {
			name := fmt.Sprintf("%s First ≥ %.1f× %s", f.Short, f.First, f.Statement)
			switch w.workload {
			case "Replay":
				name = fmt.Sprintf("%s Replay ≥ 1.0× %s", f.Short, f.Statement)
			case "Mix":
				name = fmt.Sprintf("%s Mix against %s, for reference", f.Short, f.Statement)
			}
			if len(conns) == 0 {
				ts = append(ts, Target{Target: name + " (loopback)", Where: FrameworkNames[fleetFramework],
					Measured: "not measured in this run"})
				continue
			}
			for _, n := range sortedInts(conns) {
				a, b := cell{fleetFramework, f.Kind, w.workload, n}, cell{fleetFramework, f.Baseline, w.workload, n}
				r := ix.ratio(a, b, rps)
				t := Target{Target: fmt.Sprintf("%s (loopback, %d connections)", name, n), Where: FrameworkNames[fleetFramework],
					Measured: ratio(r)}
				if !math.IsNaN(r) {
					t.Measured += fmt.Sprintf(" (%s vs %s req/s)", thousands(ix.median(a, rps)), thousands(ix.median(b, rps)))
					switch {
					case w.workload == "First":
						t.Met = verdict(r >= f.First)
					case w.min > 0:
						t.Met = verdict(r >= w.min)
					}
				}
				ts = append(ts, t)
			}
		}
	}
	return ts
}

// conns returns the concurrencies at which fw's kind was measured.
func conns(ix index, fw, kind string) map[int]bool {
	out := map[int]bool{}
	for c := range ix {
		if c.fw == fw && c.kind == kind {
			out[c.conns] = true
		}
	}
	return out
}

// fleetWorkloads are the workloads of the fleet targets, with their
// bounds (0: shown, not held to one; First's is the store's own).
var fleetWorkloads = []struct {
	workload string
	min      float64
}{{"First", 0}, {"Replay", 1.0}, {"Mix", 0}}

func ratioRow(name, where string, r, bound float64, atLeast bool) Target {
	t := Target{Target: name, Where: where, Measured: ratio(r)}
	if !math.IsNaN(r) {
		if atLeast {
			t.Met = verdict(r >= bound)
		} else {
			t.Met = verdict(r <= bound)
		}
	}
	return t
}

// cpuOp is a run's server CPU time per request (0 if not measured).
func cpuOp(r Run) float64 { return r.CPUPerOp }

func p50(s ScaleRun) float64       { return float64(s.P50) }
func scaleRPS(s ScaleRun) float64  { return s.RPS }
func nsOp(r InProcRun) float64     { return r.NsPerOp }
func allocsOp(r InProcRun) float64 { return r.AllocsPerOp }
func bytesOp(r InProcRun) float64  { return r.BytesPerOp }

func writeTargets(b *strings.Builder, ts []Target) {
	b.WriteString("| target | where | measured | met |\n| --- | --- | --- | --- |\n")
	for _, t := range ts {
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", t.Target, t.Where, t.Measured, metWord(t.Met))
	}
}

// metWord is a target's verdict as the report writes it.
func metWord(met *bool) string {
	switch {
	case met == nil:
		return "n/a"
	case *met:
		return "met"
	}
	return "**not met**"
}

// TargetsMarkdown renders the project's page of targets (bench/TARGETS.md):
// each target with what the run measured and whether it is met, and, with
// an earlier run, each figure then beside this run's. The user's page,
// Markdown, leaves targets out.
func TargetsMarkdown(d *Data) string {
	var b strings.Builder
	m := d.Machine
	b.WriteString("# Performance targets\n\n")
	b.WriteString("The targets idemkit's load benchmark is held to, and how the run that produced " +
		"[docs/benchmarks.md](../docs/benchmarks.md) measures against them. Generated with that page by " +
		"`bench/cmd/loadbench -targets`; the figures, and how they are measured, are on that page.\n\n")
	fmt.Fprintf(&b, "| | |\n| --- | --- |\n| command | `%s` |\n| mode | %s, %d repetitions |\n| started | %s, took %s |\n",
		m.Command, d.Setup.Mode, d.Setup.Reps, m.Started.UTC().Format("2006-01-02 15:04 MST"), m.Took.Round(time.Second))
	fmt.Fprintf(&b, "| machine | %s, %d cores, %s, %s |\n", m.CPU, m.CPUs, m.GoVersion, m.OS)
	if a := d.Setup.Ablation; a != "" {
		fmt.Fprintf(&b, "| ablation | %s |\n", ablationNote(a))
	}
	b.WriteString("\n")
	b.WriteString("## Targets\n\n")
	writeTargets(&b, Targets(d))
	b.WriteString("\n")
	if d.Before != nil && d.Before.Data != nil {
		writeBeforeAfter(&b, d)
	}
	return b.String()
}

// writeBeforeAfter sets each target's figure in the earlier run beside this
// run's, matching targets by what they state and where they apply.
func writeBeforeAfter(b *strings.Builder, d *Data) {
	before := map[[2]string]Target{}
	for _, t := range Targets(d.Before.Data) {
		before[targetKey(t)] = t
	}
	m := d.Before.Data.Machine
	fmt.Fprintf(b, "## Before and after\n\nBefore: %s (`%s`, %s mode, started %s). After: this run. "+
		"The two ran at different times, so compare ratios, not absolute figures.\n\n",
		d.Before.Label, m.Command, d.Before.Data.Setup.Mode, m.Started.UTC().Format("2006-01-02 15:04 MST"))
	b.WriteString("| target | where | before | after |\n| --- | --- | --- | --- |\n")
	for _, t := range Targets(d) {
		bt, ok := before[targetKey(t)]
		if !ok || t.Met == nil && bt.Met == nil {
			continue
		}
		was := bt.Measured + " " + metWord(bt.Met)
		if bt.Where != t.Where || bt.Target != t.Target {
			was += " (" + strings.TrimSpace(strings.TrimPrefix(bt.Where, StoreNames["mem"]+",")) + ")"
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", t.Target, t.Where, was, t.Measured+" "+metWord(t.Met))
	}
	b.WriteString("\n")
}

// targetKey identifies a target across runs of different sizes (a quick
// run's 100 thousand records, a full one's million): counts become #, but
// not numbers of connections, which tell apart the rows of one target at
// several concurrencies.
func targetKey(t Target) [2]string {
	norm := func(s string) string {
		s = strings.ReplaceAll(s, " (not the target's 1 million)", "")
		return countsRE.ReplaceAllStringFunc(s, func(n string) string {
			if strings.HasSuffix(n, " connections") {
				return n
			}
			return "#"
		})
	}
	return [2]string{norm(t.Target), norm(t.Where)}
}

var countsRE = regexp.MustCompile(`([0-9][0-9,]*[0-9]|[0-9])( connections)?`)
