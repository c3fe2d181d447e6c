package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FrameworkOrder is the order frameworks appear in.
var FrameworkOrder = []string{"nethttp", "gin", "echo", "echov5", "fiber", "fiberv3"}

// FrameworkNames are the frameworks' names as printed.
var FrameworkNames = map[string]string{
	"nethttp": "net/http", "gin": "Gin", "echo": "Echo v4", "echov5": "Echo v5", "fiber": "Fiber v2", "fiberv3": "Fiber v3",
}

// KindOrder is the order configurations appear in.
var KindOrder = []string{"bare", "mem", "lean", "sqlite", "sqlitetx", "insert", "postgres", "pgtx", "pginsert", "redis", "setnx", "builtin"}

// KindNames are the configurations' names as printed.
var KindNames = map[string]string{
	"bare":     "bare handler",
	"mem":      "idemkit, memory",
	"lean":     "minimal-lean (baseline)",
	"sqlite":   "idemkit, GORM SQLite",
	"sqlitetx": "idemkit, GORM SQLite, INSERT in its transaction",
	"insert":   "bare + 1 INSERT (SQLite)",
	"postgres": "idemkit, GORM PostgreSQL",
	"pgtx":     "idemkit, GORM PostgreSQL, INSERT in its transaction",
	"pginsert": "bare + 1 INSERT (PostgreSQL)",
	"redis":    "idemkit, Redis",
	"setnx":    "bare + 1 SET NX (Redis)",
	"builtin":  "Fiber's idempotency",
}

// FleetStore is a store a fleet runs on, measured against a handler that
// does one statement on the same server.
type FleetStore struct {
	Kind, Baseline string  // configurations
	Name, Short    string  // the store as printed, in full and in a target
	Statement      string  // the baseline's statement
	First          float64 // the target: First at least this times the baseline
}

// FleetStores are the stores on a database server, measured on net/http
// only: their figures are about the store, not the framework.
var FleetStores = []FleetStore{
	{"postgres", "pginsert", "GORM store on PostgreSQL", "PostgreSQL store", "one plain INSERT", 0.5},
	{"pgtx", "pginsert", "GORM store on PostgreSQL, the handler's INSERT in its transaction (`gormstore.Tx`)",
		"PostgreSQL store, transactional completion,", "the handler's INSERT alone", 0.7},
	{"redis", "setnx", "Redis store", "Redis store", "one SET NX", 0.5},
}

const fleetFramework = "nethttp"

// isFleet reports whether kind is a fleet store or its baseline.
func isFleet(kind string) bool {
	for _, f := range FleetStores {
		if kind == f.Kind || kind == f.Baseline {
			return true
		}
	}
	return false
}

// StoreNames name the stores of the scale figures.
var StoreNames = map[string]string{"mem": "memory", "sqlite": "GORM SQLite"}

// WorkloadOrder is the order workloads appear in.
var WorkloadOrder = []string{"First", "Replay", "Mix", "Conflict"}

// Markdown renders the user's page: what was measured, on what, how to
// reproduce it, and the figures. The targets the project sets itself, and
// a comparison with an earlier run, are TargetsMarkdown's.
func Markdown(d *Data, chartLink string) string {
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	fleet := len(fleetConns(indexRuns(d.Runs))) > 0
	b.WriteString("What idemkit costs, measured against the handler alone: the same endpoint on net/http, Gin, Echo v4 " +
		"and v5 and Fiber v2 and v3, once bare and once behind idemkit, with the memory store and with the GORM store on SQLite")
	if fleet {
		b.WriteString("; and on net/http the stores a fleet runs on, the GORM store on PostgreSQL and the Redis store, each " +
			"against a handler doing one statement on the same server")
	}
	b.WriteString(". " +
		"All figures come from one run of the repository's load benchmark, on the machine described below; " +
		"yours will differ, so read the ratios more than the absolute figures. A ratio compares a configuration " +
		"with the bare handler of the same framework measured in the same repetition, and each figure is the " +
		"median over the repetitions.\n\n")
	writeSummary(&b, d)
	writeMachine(&b, d)
	if len(d.Runs) > 0 {
		writeLoopback(&b, d, chartLink)
	}
	writeFleet(&b, d)
	if len(d.InProc) > 0 {
		writeInProc(&b, d)
	}
	if len(d.Scale) > 0 || len(d.Heap) > 0 {
		writeScale(&b, d)
	}
	if d.Purge != nil {
		writePurge(&b, d.Purge)
	}
	writeMethod(&b, d)
	if len(d.Notes) > 0 {
		b.WriteString("## Notes of this run\n\n")
		for _, n := range d.Notes {
			b.WriteString("- " + n + "\n")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// writeSummary gives the figures most readers want, each also in the
// tables below: throughput relative to the bare handler on loopback, at
// the concurrency the chart shows, and the in-process cost.
func writeSummary(b *strings.Builder, d *Data) {
	ix := indexRuns(d.Runs)
	c := d.Setup.TargetConns
	fws := frameworksIn(FrameworkOrder, func(f string) bool { return len(ix[cell{f, "bare", "First", c}]) > 0 })
	ip := indexInProc(d.InProc)
	if len(fws) == 0 && len(d.InProc) == 0 && len(fleetConns(ix)) == 0 {
		return
	}
	b.WriteString("## In short\n\n")
	if len(fws) > 0 {
		fmt.Fprintf(b, "Throughput relative to the bare handler (1.00: idemkit costs nothing; above 1: faster than running "+
			"the handler), loopback, %d connections:\n\n", c)
		b.WriteString("| workload | configuration |")
		for _, fw := range fws {
			b.WriteString(" " + FrameworkNames[fw] + " |")
		}
		b.WriteString("\n| --- | --- |" + strings.Repeat(" ---: |", len(fws)) + "\n")
		row := func(workload, what string, kind, base string) {
			measured := false
			cells := ""
			for _, fw := range fws {
				r := ix.ratio(cell{fw, kind, workload, c}, cell{fw, base, workload, c}, rps)
				measured = measured || !math.IsNaN(r)
				cells += " " + ratio(r) + " |"
			}
			if measured {
				fmt.Fprintf(b, "| %s | %s |%s\n", workload, what, cells)
			}
		}
		for _, w := range WorkloadOrder {
			row(w, "idemkit, memory", "mem", "bare")
		}
		for _, w := range WorkloadOrder {
			row(w, "minimal-lean (a hand-written baseline, see below)", "lean", "bare")
		}
		for _, w := range WorkloadOrder {
			row(w, "idemkit, memory, against minimal-lean", "mem", "lean")
		}
		row("First", "idemkit, GORM SQLite, against bare + 1 INSERT", "sqlite", "insert")
		row("First", "idemkit, GORM SQLite, INSERT in its transaction (`gormstore.Tx`), against bare + 1 INSERT", "sqlitetx", "insert")
		b.WriteString("\nFirst: a new key per request; Replay: a retry of a completed request; Mix: 90% new keys, " +
			"10% retries; Conflict: all connections on one key at a time. A replay skips the handler, so it may " +
			"beat the bare handler.")
		if len(ix[cell{"nethttp", "lean", "First", c}]) > 0 {
			b.WriteString(" minimal-lean is a hand-written middleware of some 160 lines of code (`bench/internal/lean`), " +
				"measured as the practical floor and never offered as a product: the same replay, 409 and 422 answers " +
				"for one process, on a store the garbage collector never scans, with no leases, expiry, events or " +
				"canonical JSON.")
		}
		b.WriteString("\n\n")
	}
	writeFleetSummary(b, ix)
	var lo, hi float64 = math.NaN(), math.NaN()
	for _, fw := range FrameworkOrder {
		r := ip.ratio(inprocKey{fw, "mem", "First"}, inprocKey{fw, "bare", "First"})
		if math.IsNaN(r) {
			continue
		}
		if math.IsNaN(lo) || r < lo {
			lo = r
		}
		if math.IsNaN(hi) || r > hi {
			hi = r
		}
	}
	if !math.IsNaN(lo) {
		span := ratio(lo)
		if ratio(hi) != span {
			span += " to " + ratio(hi)
		}
		fmt.Fprintf(b, "In process, with no network, a first request through idemkit and the memory store takes %s "+
			"times as long as the bare handler (see [In process](#in-process)).", span)
		for _, h := range d.Heap {
			if h.Store == "mem" && h.Records == d.Setup.ScaleBig {
				fmt.Fprintf(b, " The memory store keeps %.0f bytes of heap per record with %s records "+
					"(150-byte responses).", h.PerRecord, count(h.Records))
			}
		}
		b.WriteString("\n\n")
	}
}

// writeMachine says what the run measured on, and how to run it again.
func writeMachine(b *strings.Builder, d *Data) {
	m := d.Machine
	b.WriteString("## What was measured, on what\n\n")
	fmt.Fprintf(b, "| | |\n| --- | --- |\n| CPU | %s |\n| cores (`nproc`) | %d |\n| Go | %s |\n| OS | %s |\n",
		m.CPU, m.CPUs, m.GoVersion, m.OS)
	fmt.Fprintf(b, "| run | %s: %d repetitions, %s warm-up + %s per loopback run, %s per in-process figure |\n",
		d.Setup.Mode, d.Setup.Reps, durT(d.Setup.Warmup), durT(d.Setup.Duration), durT(d.Setup.InProcDuration))
	fmt.Fprintf(b, "| started | %s, took %s |\n", m.Started.UTC().Format("2006-01-02 15:04 MST"), m.Took.Round(time.Second))
	if m.LoadStart != "" {
		fmt.Fprintf(b, "| load average (1, 5, 15 min) | %s at the start, %s at the end |\n", m.LoadStart, m.LoadEnd)
	}
	if f := d.Setup.Fleet; f != nil && len(f.Servers) > 0 {
		fmt.Fprintf(b, "| database servers | %s, on loopback, started as the store tests start them (no fsync) |\n",
			strings.Join(f.Servers, ", "))
	}
	if a := d.Setup.Ablation; a != "" {
		fmt.Fprintf(b, "| ablation | %s |\n", ablationNote(a))
	}
	b.WriteString("\n")
	b.WriteString("To reproduce it, run from a clone of the repository, on an otherwise idle machine:\n\n")
	b.WriteString("```sh\nmake bench-full   # about 35 minutes: this page, its chart, and bench/TARGETS.md\n" +
		"make bench-quick  # under 5 minutes: fewer repetitions and records, written to $TMPDIR/idemkit-bench\n```\n\n")
	b.WriteString("The benchmark is `bench/cmd/loadbench` ([bench/README.md](../bench/README.md) lists its flags); " +
		"the tables below say how each figure is measured, and [How it is measured](#how-it-is-measured) " +
		"the rest.\n\n")
}

func writeLoopback(b *strings.Builder, d *Data, chartLink string) {
	ix := indexRuns(d.Runs)
	b.WriteString("## Loopback\n\n")
	fmt.Fprintf(b, "Server and load generator are separate processes, each with `GOMAXPROCS=1`, on keep-alive "+
		"loopback connections. p50 and p99 are request latencies seen by the generator; allocations and bytes are "+
		"the server process's, per request. Ratio: throughput over the bare handler's, same framework, workload "+
		"and connections.\n\n")
	if chartLink != "" {
		fmt.Fprintf(b, "![Throughput relative to the bare handler, %d connections](%s)\n\n", d.Setup.TargetConns, chartLink)
	}
	conns := map[int]bool{}
	for c := range ix {
		conns[c.conns] = true
	}
	for _, fw := range FrameworkOrder {
		has := false
		for c := range ix {
			has = has || c.fw == fw && !isFleet(c.kind)
		}
		if !has {
			continue
		}
		fmt.Fprintf(b, "### %s\n\n", FrameworkNames[fw])
		b.WriteString("| workload | conns | configuration | req/s | p50 | p99 | allocs/op | B/op | ratio to bare | other ratio | responses |\n")
		b.WriteString("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n")
		for _, w := range WorkloadOrder {
			for _, n := range sortedInts(conns) {
				for _, k := range KindOrder {
					c := cell{fw, k, w, n}
					if len(ix[c]) == 0 || isFleet(k) { // the fleet's section shows them
						continue
					}
					bare := cell{fw, "bare", w, n}
					r := "1"
					if k != "bare" {
						r = ratio(ix.ratio(c, bare, rps))
					}
					other := ""
					switch k {
					case "sqlite", "sqlitetx":
						if x := ix.ratio(c, cell{fw, "insert", w, n}, rps); !math.IsNaN(x) {
							other = ratio(x) + "× INSERT"
						}
					case "mem":
						if x := ix.ratio(c, cell{fw, "builtin", w, n}, rps); !math.IsNaN(x) {
							other = ratio(x) + "× built-in"
						}
						if x := ix.ratio(c, cell{fw, "lean", w, n}, rps); !math.IsNaN(x) {
							other = ratio(x) + "× minimal-lean"
						}
					}
					fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s |\n", w, n, KindNames[k], ix.figures(c), r, other,
						responses(ix[c]))
				}
			}
		}
		b.WriteString("\n")
	}
}

// writeFleetMethod says how the stores a fleet runs on are measured.
func writeFleetMethod(b *strings.Builder) {
	b.WriteString("- The stores a fleet runs on, on net/http only (their figures are about the store, not the framework): " +
		"idemkit with the GORM store on PostgreSQL against the bare handler plus one plain `INSERT` through GORM on the " +
		"same server, and idemkit with the Redis store against the bare handler plus one `SET key value EX ttl NX` " +
		"(a new key per order, the store's default TTL) on the same Redis. The servers are the ones the store tests " +
		"start, on loopback, tuned for tests (PostgreSQL without fsync nor synchronous commit, Redis without " +
		"persistence); every run has a table or a key prefix of its own, created empty and removed after it.\n")
}

// fleetConns returns the concurrencies at which a fleet store was measured.
func fleetConns(ix index) []int {
	conns := map[int]bool{}
	for c := range ix {
		if c.fw == fleetFramework && isFleet(c.kind) {
			conns[c.conns] = true
		}
	}
	return sortedInts(conns)
}

// writeFleetSummary gives each fleet store's throughput over its
// baseline's, per workload and concurrency.
func writeFleetSummary(b *strings.Builder, ix index) {
	conns := fleetConns(ix)
	if len(conns) == 0 {
		return
	}
	b.WriteString("The stores a fleet runs on, throughput relative to the same handler doing one statement on the same " +
		"server (see [PostgreSQL and Redis](#postgresql-and-redis)), net/http, loopback:\n\n")
	b.WriteString("| store | workload |")
	for _, n := range conns {
		fmt.Fprintf(b, " %d connections |", n)
	}
	b.WriteString("\n| --- | --- |" + strings.Repeat(" ---: |", len(conns)) + "\n")
	for _, f := range FleetStores {
		for _, w := range WorkloadOrder {
			cells, measured := "", false
			for _, n := range conns {
				r := ix.ratio(cell{fleetFramework, f.Kind, w, n}, cell{fleetFramework, f.Baseline, w, n}, rps)
				measured = measured || !math.IsNaN(r)
				cells += " " + ratio(r) + " |"
			}
			if measured {
				fmt.Fprintf(b, "| %s, against %s | %s |%s\n", f.Name, f.Statement, w, cells)
			}
		}
	}
	b.WriteString("\n")
}

// writeFleet gives the figures of the stores a fleet runs on, each beside
// its one-statement baseline.
func writeFleet(b *strings.Builder, d *Data) {
	ix := indexRuns(d.Runs)
	conns := fleetConns(ix)
	if len(conns) == 0 {
		return
	}
	b.WriteString("## PostgreSQL and Redis\n\n")
	b.WriteString("The stores a fleet runs on, on net/http, loopback, each against the same handler doing one statement on " +
		"the same server: for the GORM store on PostgreSQL, one plain `INSERT` of the order through GORM; for the Redis " +
		"store, one `SET NX` of a key per order with the expiry the store gives its records. A new key costs idemkit " +
		"its acquire and its completion where the baseline writes once: on PostgreSQL two statements (the `INSERT` " +
		"that takes the key, the `UPDATE` that completes it), on Redis two scripts; a replay costs one read (an " +
		"indexed `SELECT`, one `HMGET` on Redis). Each store follows the traffic: while new keys are the more common " +
		"it writes first, and in a storm of retries it reads first. ")
	if !hasKind(ix, "pgtx") {
		b.WriteString("The handler behind idemkit writes nothing of its own, so the ratio is the store's cost " +
			"against one statement (an application that writes rows of its own can have the completion ride their " +
			"transaction with `gormstore.Tx`; that is not measured here). ")
	} else {
		b.WriteString("In the plain configurations the handler behind idemkit writes nothing of its own, so the ratio is " +
			"the store's cost against one statement. In the transactional one (\"INSERT in its transaction\"), the handler " +
			"INSERTs its order through `gormstore.Tx` and the completion commits in that transaction: the store's `INSERT` " +
			"that takes the key, then `BEGIN`, the handler's `INSERT`, the completion's `UPDATE` and `COMMIT`, against the " +
			"same handler's `INSERT` alone; the separate-statement configuration is beside it. ")
	}
	if f := d.Setup.Fleet; f != nil && f.Pool > 0 {
		fmt.Fprintf(b, "Each server process has a pool of %d connections to its database, idemkit's and the baseline's alike. ", f.Pool)
	}
	b.WriteString("Ratio: throughput over the baseline's, same workload and connections.\n\n")
	b.WriteString("| workload | conns | configuration | req/s | p50 | p99 | allocs/op | B/op | ratio to the baseline | responses |\n")
	b.WriteString("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	shown := map[cell]bool{}
	for _, f := range FleetStores {
		for _, w := range WorkloadOrder {
			for _, n := range conns {
				for _, k := range []string{f.Kind, f.Baseline} {
					c := cell{fleetFramework, k, w, n}
					if len(ix[c]) == 0 || shown[c] && k == f.Baseline { // a baseline shared is shown once
						continue
					}
					shown[c] = true
					r := "1"
					if k == f.Kind {
						r = ratio(ix.ratio(c, cell{fleetFramework, f.Baseline, w, n}, rps))
					}
					fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s |\n", w, n, KindNames[k], ix.figures(c), r, responses(ix[c]))
				}
			}
		}
	}
	b.WriteString("\n")
}

// hasKind reports whether some run measured kind.
func hasKind(ix index, kind string) bool {
	for c := range ix {
		if c.kind == kind {
			return true
		}
	}
	return false
}

// figures are a cell's medians as the loopback tables show them: req/s,
// p50, p99, allocations and bytes per request.
func (ix index) figures(c cell) string {
	return strings.Join([]string{
		thousands(ix.median(c, rps)),
		dur(ix.median(c, func(r Run) float64 { return float64(r.P50) })),
		dur(ix.median(c, func(r Run) float64 { return float64(r.P99) })),
		fixed(ix.median(c, func(r Run) float64 { return r.AllocsPerOp }), 1),
		fixed(ix.median(c, func(r Run) float64 { return r.BytesPerOp }), 0),
	}, " | ")
}

// responses summarises the status codes of a cell's runs (all repetitions).
func responses(runs map[int]Run) string {
	total := map[int]int{}
	replayed, errors, n := 0, 0, 0
	for _, r := range runs {
		for s, k := range r.Status {
			total[s] += k
			n += k
		}
		replayed += r.Replayed
		errors += r.Errors
	}
	var codes []int
	for s := range total {
		codes = append(codes, s)
	}
	slices.Sort(codes)
	var parts []string
	for _, s := range codes {
		parts = append(parts, fmt.Sprintf("%d: %s", s, percent(total[s], n)))
	}
	if replayed > 0 {
		parts = append(parts, "replayed "+percent(replayed, n))
	}
	if errors > 0 {
		parts = append(parts, fmt.Sprintf("%d conn. errors", errors))
	}
	return strings.Join(parts, ", ")
}

func writeInProc(b *strings.Builder, d *Data) {
	ip := indexInProc(d.InProc)
	b.WriteString("## In process\n\n")
	b.WriteString("The framework's handler chain called directly (no network, no connection handling), " +
		"one goroutine, `GOMAXPROCS=1`, in a process of its own per configuration. NoKey sends no " +
		"`Idempotency-Key`: idemkit answers 400, the bare handler serves the request. " +
		"Ratio: time per request over the bare handler's for the same request (for Replay, its First: the bare " +
		"handler cannot tell a retry from a first request).\n\n")
	b.WriteString("| framework | configuration | workload | time/op | allocs/op | B/op | ratio to bare | responses |\n")
	b.WriteString("| --- | --- | --- | ---: | ---: | ---: | ---: | --- |\n")
	for _, fw := range FrameworkOrder {
		for _, k := range KindOrder {
			for _, w := range []string{"First", "Replay", "NoKey"} {
				key := inprocKey{fw, k, w}
				if len(ip[key]) == 0 {
					continue
				}
				r := "1"
				if k != "bare" {
					base := inprocKey{fw, "bare", w}
					if w == "Replay" {
						base.workload = "First"
					}
					r = ratio(ip.ratio(key, base))
				}
				var status []string
				codes := map[int]int{}
				for _, run := range ip[key] {
					for s, n := range run.Status {
						codes[s] += n
					}
				}
				for _, s := range sortedInts(keysOf(codes)) {
					status = append(status, strconv.Itoa(s))
				}
				fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", FrameworkNames[fw], KindNames[k], w,
					dur(ip.median(key, nsOp)), fixed(ip.median(key, allocsOp), 1), fixed(ip.median(key, bytesOp), 0),
					r, strings.Join(status, ", "))
			}
		}
	}
	b.WriteString("\n")
}

func keysOf(m map[int]int) map[int]bool {
	out := map[int]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

func writeScale(b *strings.Builder, d *Data) {
	b.WriteString("## Records stored: live heap and First at scale\n\n")
	b.WriteString("Live heap per record: heap in use after a forced collection with the records stored, minus the same " +
		"with the store empty, divided by the records (150-byte responses). For SQLite, what the Go heap keeps; " +
		"the records themselves are in the database file. First: net/http, loopback, against a store already " +
		"holding that many records (memory: filled through the handler; SQLite: copies of a real record inserted " +
		"in bulk); at one connection the p50 is the cost of one request, at more it is also the scheduler's " +
		"(see below).\n\n")
	if len(d.Heap) > 0 {
		b.WriteString("| store | records | live heap per record | fill time |\n| --- | ---: | ---: | ---: |\n")
		for _, h := range d.Heap {
			fmt.Fprintf(b, "| %s | %s | %.0f B | %s |\n", StoreNames[h.Store], count(h.Records), h.PerRecord,
				durT(h.FillTime))
		}
		b.WriteString("\n")
	}
	if len(d.Scale) > 0 {
		conns := map[int]bool{}
		for _, r := range d.Scale {
			conns[r.Conns] = true
		}
		b.WriteString("| store | records | conns | req/s | p50 | p99 |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
		for _, store := range []string{"mem", "sqlite"} {
			for _, c := range sortedInts(conns) {
				for _, n := range []int{d.Setup.ScaleSmall, d.Setup.ScaleBig} {
					if math.IsNaN(scaleMedian(d.Scale, store, n, c, p50)) {
						continue
					}
					fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s |\n", StoreNames[store], count(n), c,
						thousands(scaleMedian(d.Scale, store, n, c, scaleRPS)),
						dur(scaleMedian(d.Scale, store, n, c, p50)),
						dur(scaleMedian(d.Scale, store, n, c, func(s ScaleRun) float64 { return float64(s.P99) })))
				}
			}
		}
		b.WriteString("\n")
	}
}

func writePurge(b *strings.Builder, p *Purge) {
	b.WriteString("## Purging expired SQLite rows\n\n")
	fmt.Fprintf(b, "First on net/http and the GORM SQLite store at a fixed %.0f requests/s (latency measured from "+
		"when each request was due, so a stall counts in full), first with nothing to purge, then while the "+
		"store's own background purger deletes %s expired rows (inserted in bulk in %s, before the purger "+
		"started).\n\n", p.Rate, count(p.Rows), durT(p.InsertTook))
	b.WriteString("| | requests | p50 | p99 | max | late or unsent |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
	fmt.Fprintf(b, "| without purge | %d | %s | %s | %s | %d |\n", p.Without.Count, durT(p.Without.P50),
		durT(p.Without.P99), durT(p.Without.Max), p.LateWithout)
	fmt.Fprintf(b, "| during purge | %d | %s | %s | %s | %d |\n\n", p.During.Count, durT(p.During.P50),
		durT(p.During.P99), durT(p.During.Max), p.LateDuring)
	if p.Finished {
		fmt.Fprintf(b, "The purge took %s (%s rows/s).\n\n", durT(p.PurgeTook),
			thousands(float64(p.Rows)/p.PurgeTook.Seconds()))
	} else {
		fmt.Fprintf(b, "The purge had not finished when the measurement stopped after %s.\n\n", durT(p.PurgeTook))
	}
	var bad []string
	for _, s := range sortedInts(keysOf(p.StatusDuring)) {
		if s != 201 {
			bad = append(bad, fmt.Sprintf("%d × %d", p.StatusDuring[s], s))
		}
	}
	if len(bad) > 0 {
		fmt.Fprintf(b, "Responses other than 201 during the purge: %s.\n\n", strings.Join(bad, ", "))
	}
}

func writeMethod(b *strings.Builder, d *Data) {
	b.WriteString("## How it is measured\n\n")
	b.WriteString("- Endpoint: `POST /orders`; the handler decodes about 100 bytes of JSON with the framework's " +
		"binding and answers 201 with about 150 bytes of JSON. Configurations per framework: the bare handler; " +
		"idemkit with the memory store; idemkit with the GORM store on SQLite (`sqlitedb.Open`, a temporary file); " +
		"the bare handler plus one plain `INSERT` through GORM on SQLite (the SQLite baseline); on Fiber v2 and v3, " +
		"Fiber's own `middleware/idempotency` with `KeyHeader: \"Idempotency-Key\"` (the header the others read; " +
		"Fiber's default is `X-Idempotency-Key`). Keys are 36-character UUID-shaped strings, the only length " +
		"Fiber's middleware accepts by default.\n")
	fmt.Fprintf(b, "- The memory store is created with `WithMaxRecords(%s)` so that no run fills it (a full store "+
		"answers 429, which is not what is measured); everything else is at its defaults.\n", count(d.Setup.MemMaxRecords))
	if len(fleetConns(indexRuns(d.Runs))) > 0 {
		writeFleetMethod(b)
	}
	b.WriteString("- Workloads: First, a new key per request; Replay, one completed key; Mix, 90% new keys and 10% " +
		"retries of keys the same connection completed; Conflict, consecutive requests of all connections share a " +
		"key (as many requests per key as connections), so most find it in flight (409) or completed (replay).\n")
	b.WriteString("- Load generator: Go, raw keep-alive TCP connections, requests rendered once as bytes with the key " +
		"patched in place, responses read by a minimal HTTP/1.1 reader (Content-Length and chunked). Closed loop: " +
		"each connection sends its next request when the answer to the previous one arrived.\n")
	b.WriteString("- Each server runs in a child process of the tool; between runs the child rebuilds its server " +
		"and store, so every run starts empty. Within a repetition, the configurations of a framework run one after " +
		"the other for each workload and concurrency, in an order rotated per repetition.\n")
	b.WriteString("- Allocations per request: the server process's `runtime.MemStats` (Mallocs, TotalAlloc) read " +
		"at the start and end of the measured window, divided by the requests answered in it.\n")
	b.WriteString("- p50/p99: nearest-rank percentiles of the measured window's latencies. With several connections " +
		"and one server thread, Go's scheduler may serve some connections more often than others, so a p50 can lie " +
		"far below the mean latency (connections ÷ req/s) while the p99 grows; throughput and p99 are the steadier " +
		"figures there.\n\n")
}

// percent formats k of n as a percentage, never rounding a few to 0%.
func percent(k, n int) string {
	p := 100 * float64(k) / float64(max(n, 1))
	switch {
	case k > 0 && p < 0.1:
		return "<0.1%"
	case p < 1:
		return fixed(p, 1) + "%"
	default:
		return fixed(p, 0) + "%"
	}
}

func ratio(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

func fixed(x float64, prec int) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}

// thousands formats a rate as an integer with thousands separators.
func thousands(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return count(int(math.Round(x)))
}

func count(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + count(-n)
	}
	var out []byte
	for i, c := range []byte(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, c)
	}
	return string(out)
}

// dur formats nanoseconds with three significant digits.
func dur(ns float64) string {
	if math.IsNaN(ns) {
		return "n/a"
	}
	return durT(time.Duration(ns))
}

func durT(d time.Duration) string {
	f := float64(d)
	switch {
	case d <= 0:
		return "0"
	case f < 1e3:
		return fmt.Sprintf("%.0f ns", f)
	case f < 1e6:
		return sig3(f/1e3) + " µs"
	case f < 1e9:
		return sig3(f/1e6) + " ms"
	default:
		return sig3(f/1e9) + " s"
	}
}

func sig3(x float64) string {
	switch {
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
}

// ablationNote says that the memory-store rows of a run are not idemkit as
// shipped.
func ablationNote(a string) string {
	return fmt.Sprintf("`%s`: the rows \"%s\" measure idemkit with that part taken out "+
		"(internal/costfloor), not idemkit as shipped", a, KindNames["mem"])
}
