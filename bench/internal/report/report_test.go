package report

import (
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
	"time"
)

func sample() *Data {
	d := &Data{
		Machine: Machine{CPUs: 2, CPU: "Test CPU", GoVersion: "go1.26", OS: "linux/amd64",
			Command: "loadbench -quick", Started: time.Unix(0, 0), Took: time.Minute},
		Setup: Setup{Mode: "quick", Reps: 3, Conns: []int{16}, TargetConns: 16, ScaleSmall: 10_000,
			ScaleBig: 1_000_000, Duration: time.Second, MemMaxRecords: 8_000_000},
	}
	add := func(fw, kind, w string, rps ...float64) {
		for rep, x := range rps {
			d.Runs = append(d.Runs, Run{Framework: fw, Kind: kind, Workload: w, Conns: 16, Rep: rep, RPS: x,
				P50: time.Millisecond, P99: 3 * time.Millisecond, AllocsPerOp: 30, BytesPerOp: 3000,
				Status: map[int]int{201: int(x)}})
		}
	}
	for _, w := range WorkloadOrder {
		add("nethttp", "bare", w, 100, 200, 100)
		add("fiber", "bare", w, 100, 100, 100)
		add("fiber", "builtin", w, 80, 80, 80)
	}
	// Ratios per repetition 0.9, 0.5, 0.95: the median of the ratios is
	// 0.9, while the ratio of the medians (100/100) would be 1.0.
	add("nethttp", "mem", "First", 90, 100, 95)
	add("nethttp", "mem", "Mix", 95, 190, 99)
	add("nethttp", "mem", "Replay", 120, 240, 120)
	add("fiber", "mem", "Mix", 100, 100, 110) // 1.25x the built-in's 80
	add("fiber", "mem", "First", 72, 72, 72)  // 0.9x the built-in
	// Fiber v3: ahead of its built-in on Mix, within 10% on First.
	for _, w := range []string{"Mix", "First"} {
		add("fiberv3", "bare", w, 100, 100, 100)
		add("fiberv3", "builtin", w, 80, 80, 80)
	}
	add("fiberv3", "mem", "Mix", 84, 84, 84)   // 1.05x the built-in
	add("fiberv3", "mem", "First", 70, 70, 70) // 0.875x the built-in
	add("nethttp", "sqlite", "First", 20, 40, 20)
	add("nethttp", "insert", "First", 50, 100, 30)
	// minimal-lean: idemkit's ratios to it are 0.9, 0.5, 0.95 on First.
	add("nethttp", "lean", "First", 100, 200, 100)
	add("nethttp", "lean", "Mix", 95, 190, 99)
	add("nethttp", "lean", "Replay", 110, 200, 100)
	// The server's CPU per request, where measured: idemkit's First costs
	// 1/0.9 of minimal-lean's.
	for i := range d.Runs {
		if r := &d.Runs[i]; r.Framework == "nethttp" && r.Workload == "First" && (r.Kind == "mem" || r.Kind == "lean") {
			r.CPUPerOp = map[string]float64{"mem": 10_000, "lean": 9_000}[r.Kind]
		}
	}
	// The transactional completion: 0.8, 0.8, 0.67 of the INSERT alone.
	add("nethttp", "sqlitetx", "First", 40, 80, 20)
	for rep := range 3 {
		d.InProc = append(d.InProc,
			InProcRun{Framework: "nethttp", Kind: "bare", Workload: "First", Rep: rep, NsPerOp: 1000},
			InProcRun{Framework: "nethttp", Kind: "mem", Workload: "First", Rep: rep, NsPerOp: 1600},
			InProcRun{Framework: "nethttp", Kind: "bare", Workload: "NoKey", Rep: rep, NsPerOp: 1000},
			InProcRun{Framework: "nethttp", Kind: "mem", Workload: "NoKey", Rep: rep, NsPerOp: 800},
		)
		d.Scale = append(d.Scale,
			ScaleRun{Store: "mem", Records: 10_000, Conns: 1, Rep: rep, P50: time.Millisecond},
			ScaleRun{Store: "mem", Records: 1_000_000, Conns: 1, Rep: rep, P50: 1100 * time.Microsecond},
			// At 16 connections the p50 doubles: the target reads 1 connection.
			ScaleRun{Store: "mem", Records: 10_000, Conns: 16, Rep: rep, P50: time.Millisecond, RPS: 1000},
			ScaleRun{Store: "mem", Records: 1_000_000, Conns: 16, Rep: rep, P50: 2 * time.Millisecond, RPS: 900})
	}
	d.Heap = []HeapFigure{{Store: "mem", Records: 1_000_000, PerRecord: 614}}
	d.Purge = &Purge{Rows: 1_000_000, Rate: 500, Finished: true, PurgeTook: 10 * time.Second,
		Without: Latency{Count: 100, P99: 2 * time.Millisecond}, During: Latency{Count: 100, P99: 5 * time.Millisecond}}
	return d
}

func find(t *testing.T, ts []Target, prefix, where string) Target {
	t.Helper()
	for _, x := range ts {
		if strings.HasPrefix(x.Target, prefix) && x.Where == where {
			return x
		}
	}
	t.Fatalf("no target %q for %q in %+v", prefix, where, ts)
	return Target{}
}

func TestTargetsUseMedianOfPerRepetitionRatios(t *testing.T) {
	ts := Targets(sample())
	check := func(prefix, where, measured string, met bool) {
		t.Helper()
		x := find(t, ts, prefix, where)
		if !strings.HasPrefix(x.Measured, measured) || x.Met == nil || *x.Met != met {
			got := "nil"
			if x.Met != nil {
				got = map[bool]string{true: "met", false: "not met"}[*x.Met]
			}
			t.Errorf("%s / %s: measured %q (%s), want %q met=%v", prefix, where, x.Measured, got, measured, met)
		}
	}
	check("First ≥ 0.90× bare", "net/http", "0.90", true)
	check("Mix ≥ 0.90× bare", "net/http", "0.95", true)
	check("Replay ≥ 1.0× bare", "net/http", "1.20", true)
	check("Fiber v2: Mix ≥ 1.25×", "Fiber v2", "1.25", true)
	check("Fiber v2: First ≥ 1.00×", "Fiber v2", "0.90", false)
	check("Fiber v3: Mix ≥ 1.00×", "Fiber v3", "1.05", true)
	check("Fiber v3: First ≥ 1.00×", "Fiber v3", "0.88", false)
	check("in-process First ≤ 1.4× bare", "net/http", "1.60", false)
	check("no-key 400", "net/http", "0.80", true)
	check("memory store ≤ 300 B", "memory, 1,000,000 records", "614 B", false)
	check("First's p50 within 20%", "memory", "1.10× (1.00 ms → 1.10 ms; at 16 connections, req/s 1,000 → 900)", true)
	check("SQLite store First ≥ 0.5×", "net/http", "0.40", false)
	check("First ≥ 0.95× minimal-lean", "net/http", "0.90 (by the server's CPU per request: 0.90)", false)
	check("Mix ≥ 0.95× minimal-lean", "net/http", "1.00", true)
	check("Replay ≥ 0.95× minimal-lean", "net/http", "1.20", true)
	check("SQLite store, transactional completion, First ≥ 0.7×", "net/http", "0.80 (40 vs 50 req/s)", true)
	check("p99 during a purge ≤ 2×", "SQLite, 1,000,000 expired rows, First at 500/s", "2.50×", false)
	// Fiber has no mem Replay run: the target row shows n/a, not a guess.
	x := find(t, ts, "Replay ≥ 1.0× bare", "Fiber v2")
	if x.Met != nil || x.Measured != "n/a" {
		t.Errorf("Fiber Replay without data: %+v", x)
	}
}

// The user's page: the figures, what they were measured on and how to run
// it again; no targets and no verdicts, which are the project's.
func TestMarkdown(t *testing.T) {
	md := Markdown(sample(), "img/chart.svg")
	for _, want := range []string{
		"| CPU | Test CPU |", "| cores (`nproc`) | 2 |", "| Go | go1.26 |", "make bench-full",
		"![Throughput relative to the bare handler, 16 connections](img/chart.svg)",
		"### net/http", "### Fiber v2", "### Fiber v3", "| First | 16 | idemkit, memory | 95 |", "0.40× INSERT", "1.25× built-in",
		"## In process", "## Purging expired SQLite rows",
		// The summary: median ratios per repetition, as in the tables.
		"## In short", "| First | idemkit, memory | 0.90 | 0.72 |", "| Replay | idemkit, memory | 1.20 | n/a |",
		"| First | idemkit, GORM SQLite, against bare + 1 INSERT | 0.40 | n/a |",
		"| First | idemkit, memory, against minimal-lean | 0.90 | n/a |", "| First | minimal-lean (a hand-written baseline, see below) | 1.00 | n/a |",
		"| First | idemkit, GORM SQLite, INSERT in its transaction (`gormstore.Tx`), against bare + 1 INSERT | 0.80 | n/a |",
		"| First | 16 | idemkit, GORM SQLite, INSERT in its transaction | 40 |", "0.80× INSERT", "0.90× minimal-lean",
		"takes 1.60 times as long", "614 bytes of heap per record with 1,000,000 records",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, not := range []string{"NaN", "not met", "| met |", "Target", "target", "issue", "loadbench -quick"} {
		if strings.Contains(md, not) {
			t.Errorf("the user's page says %q", not)
		}
	}
}

// The project's page: each target with its verdict, and the run's command.
func TestTargetsMarkdown(t *testing.T) {
	md := TargetsMarkdown(sample())
	for _, want := range []string{
		"# Performance targets", "`loadbench -quick`", "| target | where | measured | met |",
		"| First ≥ 0.90× bare (loopback, 16 connections) | net/http | 0.90 | met |", "**not met**",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("targets page lacks %q", want)
		}
	}
}

func TestSVGIsWellFormedWithOneBarPerMeasuredRatio(t *testing.T) {
	svg := SVG(sample())
	dec := xml.NewDecoder(strings.NewReader(svg))
	bars := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			for _, a := range se.Attr {
				if a.Name.Local == "class" && a.Value == "bar" {
					bars++
				}
			}
		}
	}
	// nethttp: mem First, Mix, Replay, sqlite First, insert First;
	// fiber: mem Mix, First, builtin x 4 workloads;
	// fiberv3: mem Mix, First, builtin Mix, First; nethttp lean First,
	// Mix, Replay.
	if bars != 18 {
		t.Errorf("%d bars, want 18", bars)
	}
	if !strings.Contains(svg, "Fiber&#39;s idempotency") {
		t.Error("legend text not escaped")
	}
}

func TestFormatting(t *testing.T) {
	for _, c := range []struct {
		got, want string
	}{
		{count(1234567), "1,234,567"}, {count(999), "999"}, {count(-1000), "-1,000"},
		{durT(1500 * time.Nanosecond), "1.50 µs"}, {durT(136 * time.Millisecond), "136 ms"},
		{durT(12340 * time.Microsecond), "12.3 ms"}, {durT(500), "500 ns"}, {dur(math.NaN()), "n/a"},
		{ratio(math.NaN()), "n/a"}, {percent(3, 10000), "<0.1%"}, {percent(30, 10000), "0.3%"}, {percent(0, 10), "0.0%"},
		{percent(5, 10), "50%"}, {ratio(0.706), "0.71"}, {thousands(23456.6), "23,457"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}

// With an earlier run, the report sets each measured target's figure and
// verdict then beside this run's.
func TestBeforeAndAfter(t *testing.T) {
	d := sample()
	old := sample()
	old.Heap = []HeapFigure{{Store: "mem", Records: 1_000_000, PerRecord: 614}}
	d.Heap = []HeapFigure{{Store: "mem", Records: 1_000_000, PerRecord: 280}}
	d.Before = &Before{Label: "commit abc1234, quick run", Data: old}
	md := TargetsMarkdown(d)
	if !strings.Contains(md, "## Before and after") || !strings.Contains(md, "commit abc1234, quick run") {
		t.Fatalf("no before-and-after section naming the earlier run:\n%s", md)
	}
	row := "| memory store ≤ 300 B of live heap per record (150-byte response) | memory, 1,000,000 records | 614 B **not met** | 280 B met |"
	if !strings.Contains(md, row) {
		t.Fatalf("want the row\n%s\nin\n%s", row, md)
	}
	if strings.Contains(md[strings.Index(md, "## Before and after"):], "default memory store capacity") {
		t.Fatal("a target neither run measured is listed in the comparison")
	}
	if strings.Contains(TargetsMarkdown(sample()), "## Before and after") {
		t.Fatal("a report without an earlier run has a before-and-after section")
	}
}

// A quick run's targets (100 thousand records) are compared with a full
// run's (a million), the earlier size named beside its figure.
func TestBeforeAndAfterAcrossSizes(t *testing.T) {
	d := sample()
	old := sample()
	old.Setup.ScaleBig = 100_000
	old.Heap = []HeapFigure{{Store: "mem", Records: 100_000, PerRecord: 463}}
	d.Heap = []HeapFigure{{Store: "mem", Records: 1_000_000, PerRecord: 288}}
	d.Before = &Before{Label: "quick", Data: old}
	md := TargetsMarkdown(d)
	row := "| memory store ≤ 300 B of live heap per record (150-byte response) | memory, 1,000,000 records | 463 B **not met** (100,000 records) | 288 B met |"
	if !strings.Contains(md, row) {
		t.Fatalf("want the row\n%s\nin\n%s", row, md)
	}
}

// withFleet is sample() with the stores a fleet runs on measured at 16
// and 64 connections, each against its one-statement baseline.
func withFleet() *Data {
	d := sample()
	d.Setup.Fleet = &Fleet{Servers: []string{"PostgreSQL 15.8", "Redis 7.0.15"}, Conns: []int{16, 64}, TargetConns: 16, Pool: 64}
	add := func(kind, w string, conns int, rps ...float64) {
		for rep, x := range rps {
			d.Runs = append(d.Runs, Run{Framework: "nethttp", Kind: kind, Workload: w, Conns: conns, Rep: rep, RPS: x,
				P50: time.Millisecond, P99: 3 * time.Millisecond, Status: map[int]int{201: int(x)}})
		}
	}
	for _, n := range []int{16, 64} {
		for _, w := range []string{"First", "Replay", "Mix"} {
			add("pginsert", w, n, 1000, 1000, 1000)
			add("setnx", w, n, 2000, 2000, 2000)
		}
		// Per repetition 0.4, 0.6, 0.5 of the INSERT: the median is 0.5, met.
		add("postgres", "First", n, 400, 600, 500)
		add("postgres", "Replay", n, 3000, 3000, 3000)
		add("postgres", "Mix", n, 450, 450, 450)
		add("redis", "First", n, 900, 900, 900)
		add("redis", "Replay", n, 1800, 1800, 1800) // 0.90x, not met
		add("redis", "Mix", n, 1000, 1000, 1000)
	}
	return d
}

func TestFleetTargets(t *testing.T) {
	ts := Targets(withFleet())
	for _, n := range []string{"16", "64"} {
		at := " (loopback, " + n + " connections)"
		for _, c := range []struct {
			target, measured string
			met              *bool
		}{
			{"PostgreSQL store First ≥ 0.5× one plain INSERT" + at, "0.50 (500 vs 1,000 req/s)", verdict(true)},
			{"PostgreSQL store Replay ≥ 1.0× one plain INSERT" + at, "3.00", verdict(true)},
			{"PostgreSQL store Mix against one plain INSERT, for reference" + at, "0.45", nil},
			{"Redis store First ≥ 0.5× one SET NX" + at, "0.45", verdict(false)},
			{"Redis store Replay ≥ 1.0× one SET NX" + at, "0.90", verdict(false)},
			{"Redis store Mix against one SET NX, for reference" + at, "0.50", nil},
		} {
			x := find(t, ts, c.target, "net/http")
			if x.Target != c.target || !strings.HasPrefix(x.Measured, c.measured) || (x.Met == nil) != (c.met == nil) ||
				x.Met != nil && *x.Met != *c.met {
				t.Errorf("%s: %+v, want measured %q, met %v", c.target, x, c.measured, metWord(c.met))
			}
		}
	}
	// A run without them (an earlier one's JSON, say) names the targets
	// as not measured, and guesses nothing.
	for _, x := range Targets(sample()) {
		if strings.HasPrefix(x.Target, "PostgreSQL store") || strings.HasPrefix(x.Target, "Redis store") {
			if x.Met != nil || x.Measured != "not measured in this run" {
				t.Errorf("without fleet runs: %+v", x)
			}
		}
	}
	find(t, Targets(sample()), "PostgreSQL store First ≥ 0.5× one plain INSERT (loopback)", "net/http")
	find(t, Targets(sample()), "Redis store Replay ≥ 1.0× one SET NX (loopback)", "net/http")
}

func TestFleetMarkdown(t *testing.T) {
	md := Markdown(withFleet(), "")
	for _, want := range []string{
		"| database servers | PostgreSQL 15.8, Redis 7.0.15, on loopback",
		"| store | workload | 16 connections | 64 connections |",
		"| GORM store on PostgreSQL, against one plain INSERT | First | 0.50 | 0.50 |",
		"| Redis store, against one SET NX | Replay | 0.90 | 0.90 |",
		"## PostgreSQL and Redis", "a pool of 64 connections",
		"| First | 64 | idemkit, GORM PostgreSQL | 500 |", "| First | 64 | bare + 1 INSERT (PostgreSQL) | 1,000 |",
		"| Mix | 16 | idemkit, Redis | 1,000 |", "`SET key value EX ttl NX`",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// Shown in their own section, not again in net/http's table.
	netHTTP := md[strings.Index(md, "### net/http"):strings.Index(md, "### Fiber v2")]
	if strings.Contains(netHTTP, "PostgreSQL") || strings.Contains(netHTTP, "Redis") {
		t.Errorf("net/http's table repeats the fleet's rows:\n%s", netHTTP)
	}
	// An earlier run's JSON, without them: no section, nothing undefined.
	old := Markdown(sample(), "")
	for _, not := range []string{"## PostgreSQL and Redis", "database servers", "NaN", "| store | workload |",
		"stores a fleet runs on", "SET NX"} {
		if strings.Contains(old, not) {
			t.Errorf("a page without fleet runs says %q", not)
		}
	}
}

// The rows of one target at 16 and at 64 connections are compared with
// the same rows of the earlier run, not with each other.
func TestBeforeAndAfterKeepsConcurrenciesApart(t *testing.T) {
	d := withFleet()
	old := withFleet()
	for i, r := range old.Runs {
		if r.Kind == "postgres" && r.Workload == "First" && r.Conns == 64 {
			old.Runs[i].RPS = 300
		}
	}
	d.Before = &Before{Label: "earlier", Data: old}
	md := TargetsMarkdown(d)
	for _, row := range []string{
		"| PostgreSQL store First ≥ 0.5× one plain INSERT (loopback, 16 connections) | net/http | 0.50 (500 vs 1,000 req/s) met | 0.50 (500 vs 1,000 req/s) met |",
		"| PostgreSQL store First ≥ 0.5× one plain INSERT (loopback, 64 connections) | net/http | 0.30 (300 vs 1,000 req/s) **not met** | 0.50 (500 vs 1,000 req/s) met |",
	} {
		if !strings.Contains(md, row) {
			t.Errorf("want the row\n%s\nin\n%s", row, md)
		}
	}
}

// A run with parts of idemkit taken out says so on both pages, and a run of
// idemkit as shipped says nothing of it.
func TestAblationIsStated(t *testing.T) {
	d := sample()
	for _, md := range []string{Markdown(d, "c.svg"), TargetsMarkdown(d)} {
		if strings.Contains(md, "ablation") {
			t.Errorf("a run of idemkit as shipped mentions an ablation")
		}
	}
	d.Setup.Ablation = "no-store"
	for name, md := range map[string]string{"user's page": Markdown(d, "c.svg"), "targets page": TargetsMarkdown(d)} {
		if !strings.Contains(md, "| ablation | `no-store`: the rows \"idemkit, memory\" measure idemkit with that part taken out") {
			t.Errorf("the %s does not say the memory-store rows were ablated", name)
		}
	}
}
