// Command loadbench measures what idemkit costs against the bare handler,
// on loopback and in process, for net/http, Gin, Echo v4 and v5 and Fiber
// v2 and v3, and
// writes a markdown page of the figures, a page of the project's targets
// and an SVG chart.
//
//	go run ./bench/cmd/loadbench -quick -out report.md -chart chart.svg
//
// Each server runs in a child process of this binary (GOMAXPROCS=1); the
// load generator runs in the parent (GOMAXPROCS=1), on raw keep-alive
// loopback connections. Every run is bounded in time and request count,
// and the whole command by -timeout. -quick finishes in a few minutes;
// the full run takes about 35 minutes.
//
// -profile DIR also writes CPU and allocation profiles of First (or
// -profile-workload), in process and on loopback, for the configurations
// of -profile-configs, and their top 10 functions
// in DIR/top.txt.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/bench/internal/report"
	"github.com/idemkit/idemkit/bench/internal/servers"
	"github.com/idemkit/idemkit/internal/costfloor"
)

// config is the parent's configuration, from flags.
type config struct {
	quick                       bool
	out, chart, chartLink, json string
	targets                     string
	from, before, beforeLabel   string
	command                     string
	sections                    map[string]bool
	frameworks, kinds           []string
	workloads                   []string
	conns                       []int
	fleetWorkloads              []string
	fleetConns                  []int
	fleetPool                   int
	reps                        int
	warmup, duration            time.Duration
	maxRequests                 int
	inprocDuration              time.Duration
	scaleSmall, scaleBig        int
	scaleDuration               time.Duration
	purgeRows                   int
	purgeRate                   float64
	purgeBase, purgeCap         time.Duration
	memMaxRecords               int
	ablation                    costfloor.Ablation
	profileDir                  string
	profileConfigs              []string
	profileDuration             time.Duration
	profileWorkload             string
	timeout                     time.Duration
	verbose                     bool
}

func main() {
	var child childOptions
	var childMode string
	flag.StringVar(&childMode, "child", "", "internal: run as a child process (serve or inproc)")
	flag.StringVar(&child.spec, "child-spec", "", "internal: framework/kind of the child's server")
	flag.StringVar(&child.dir, "child-dir", "", "internal: the child's directory for SQLite files")
	flag.IntVar(&child.maxRecords, "child-max-records", 0, "internal: memory store bound")
	flag.DurationVar(&child.purgeInterval, "child-purge-interval", 0, "internal: GORM store purge interval (<0: none)")
	flag.IntVar(&child.pool, "child-pool", 0, "internal: connection pool of the fleet servers")
	childAblation := flag.String("child-ablate", "", "internal: what is taken out of the memory-store configuration")
	flag.StringVar(&child.workloads, "child-workloads", "", "internal: in-process workloads")
	flag.DurationVar(&child.duration, "child-duration", 0, "internal: in-process duration per workload")
	childPrefix := flag.Uint64("child-prefix", 1, "internal: key prefix")
	flag.StringVar(&child.profileDir, "child-profile-dir", "", "internal: where the child writes profiles")

	var c config
	flag.BoolVar(&c.quick, "quick", false, "short run (under 5 minutes): fewer repetitions, shorter runs, 100k instead of 1M records")
	flag.StringVar(&c.out, "out", "benchmarks.md", "where to write the markdown page of the figures")
	flag.StringVar(&c.chart, "chart", "", "where to write the SVG chart (none if empty)")
	flag.StringVar(&c.chartLink, "chart-link", "", "the chart's path as the report links it (default: -chart relative to -out's directory)")
	flag.StringVar(&c.targets, "targets", "", "where to write the page of targets, each met or not (none if empty)")
	flag.StringVar(&c.json, "json", "", "where to write the raw figures as JSON (none if empty)")
	flag.StringVar(&c.from, "from", "", "measure nothing: render the report (and chart) from the JSON of an earlier run")
	flag.StringVar(&c.before, "before", "", "the JSON (-json) of an earlier run whose targets -targets sets beside this run's")
	flag.StringVar(&c.beforeLabel, "before-label", "an earlier run", "what the -before run measured (the commit, say)")
	flag.StringVar(&c.command, "command", "", "the command recorded in the report (default: this command line)")
	sections := flag.String("sections", "loopback,inproc,scale,purge,profile", "sections to run")
	frameworks := flag.String("frameworks", strings.Join(servers.Frameworks, ","), "frameworks")
	kinds := flag.String("kinds", strings.Join(servers.Kinds, ","),
		"configurations: "+strings.Join(servers.Kinds, ", ")+" (postgres and pginsert need "+servers.PostgresEnv+
			", redis and setnx "+servers.RedisEnv+": make bench-quick starts the servers)")
	workloads := flag.String("workloads", "First,Replay,Mix,Conflict", "loopback workloads")
	conns := flag.String("conns", "", "loopback concurrencies (default 16 quick, 1,16,64 full)")
	fleetWorkloads := flag.String("fleet-workloads", "First,Replay,Mix", "loopback workloads of postgres, pginsert, redis and setnx")
	fleetConns := flag.String("fleet-conns", "", "loopback concurrencies of postgres, pginsert, redis and setnx (default 16 quick, 16,64 full)")
	flag.IntVar(&c.fleetPool, "fleet-pool", servers.DefaultPool, "connections in the pool of each of postgres, pginsert, redis and setnx")
	flag.IntVar(&c.reps, "reps", 0, "repetitions (default 3 quick, 4 full)")
	flag.DurationVar(&c.warmup, "warmup", 0, "warm-up per loopback run (default 100ms quick, 250ms full)")
	flag.DurationVar(&c.duration, "duration", 0, "measured window per loopback run (default 400ms quick, 1s full)")
	flag.IntVar(&c.maxRequests, "max-requests", 2_000_000, "bound on the requests measured per run")
	flag.DurationVar(&c.inprocDuration, "inproc-duration", 0, "per in-process figure (default 300ms quick, 1s full)")
	flag.IntVar(&c.scaleSmall, "scale-small", 10_000, "records stored, small case")
	flag.IntVar(&c.scaleBig, "scale-big", 0, "records stored, big case (default 100k quick, 1M full)")
	flag.DurationVar(&c.scaleDuration, "scale-duration", 0, "measured window of a scale run (default 1s quick, 2s full)")
	flag.IntVar(&c.purgeRows, "purge-rows", 0, "expired SQLite rows to purge (default 100k quick, 1M full)")
	flag.Float64Var(&c.purgeRate, "purge-rate", 500, "requests per second during the purge measurement")
	flag.DurationVar(&c.purgeBase, "purge-base", 0, "measurement without a purge (default 3s quick, 10s full)")
	flag.DurationVar(&c.purgeCap, "purge-cap", 0, "longest measurement during a purge (default 60s quick, 5m full)")
	flag.IntVar(&c.memMaxRecords, "mem-max-records", 8_000_000, "memory store bound (high enough that no run fills it)")
	ablation := flag.String("ablate", "none", "for analysis: what to take out of the memory-store configuration (none, "+
		string(costfloor.RawFingerprint)+", "+string(costfloor.NoStore)+", "+string(costfloor.NoStoreNoFingerprint)+
		"); the pages then say so")
	flag.StringVar(&c.profileDir, "profile", "", "write CPU and allocation profiles of First (or -profile-workload) here")
	profileConfigs := flag.String("profile-configs", "nethttp/bare,nethttp/mem,fiber/bare,fiber/mem,fiber/builtin,nethttp/sqlite,nethttp/insert",
		"configurations profiled with -profile")
	flag.DurationVar(&c.profileDuration, "profile-duration", 0, "measured window per profile (default 2s quick, 5s full)")
	flag.StringVar(&c.profileWorkload, "profile-workload", "First", "the workload profiled with -profile: First or Replay")
	flag.DurationVar(&c.timeout, "timeout", 0, "bound on the whole command (default 10m quick, 60m full)")
	flag.BoolVar(&c.verbose, "v", true, "print each run's figures to stderr")
	flag.Parse()

	var err error
	if child.ablation, err = costfloor.Parse(*childAblation); err == nil {
		c.ablation, err = costfloor.Parse(*ablation)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(2)
	}

	switch childMode {
	case "serve":
		if err := serveChild(child); err != nil {
			fmt.Fprintln(os.Stderr, "loadbench child:", err)
			os.Exit(1)
		}
		return
	case "inproc":
		child.prefix = uint32(*childPrefix)
		if err := inprocChild(child); err != nil {
			fmt.Fprintln(os.Stderr, "loadbench child:", err)
			os.Exit(1)
		}
		return
	case "":
	default:
		fmt.Fprintln(os.Stderr, "loadbench: unknown -child mode", childMode)
		os.Exit(2)
	}

	// The load generator gets one P, as each server does, so that on a
	// 2-core machine they do not fight over the same core.
	runtime.GOMAXPROCS(1)

	c.sections = set(*sections)
	c.frameworks = list(*frameworks)
	c.kinds = list(*kinds)
	c.workloads = list(*workloads)
	c.fleetWorkloads = list(*fleetWorkloads)
	c.profileConfigs = list(*profileConfigs)
	def := func(d *time.Duration, quick, full time.Duration) {
		if *d == 0 {
			*d = pick(c.quick, quick, full)
		}
	}
	def(&c.warmup, 100*time.Millisecond, 250*time.Millisecond)
	def(&c.duration, 400*time.Millisecond, time.Second)
	def(&c.inprocDuration, 300*time.Millisecond, time.Second)
	def(&c.scaleDuration, time.Second, 2*time.Second)
	def(&c.purgeBase, 3*time.Second, 10*time.Second)
	def(&c.purgeCap, time.Minute, 5*time.Minute)
	def(&c.profileDuration, 2*time.Second, 5*time.Second)
	def(&c.timeout, 10*time.Minute, time.Hour)
	if c.fleetPool <= 0 {
		c.fleetPool = servers.DefaultPool
	}
	if c.reps <= 0 {
		c.reps = pick(c.quick, 3, 4)
	}
	if c.scaleBig == 0 {
		c.scaleBig = pick(c.quick, 100_000, 1_000_000)
	}
	if c.purgeRows == 0 {
		c.purgeRows = pick(c.quick, 100_000, 1_000_000)
	}
	if *conns == "" {
		*conns = pick(c.quick, "16", "1,16,64")
	}
	if *fleetConns == "" {
		// Each configuration of the fleet costs a few seconds per
		// concurrency: the quick run keeps to 16, to stay under 5 minutes.
		*fleetConns = pick(c.quick, "16", "16,64")
	}
	for _, f := range []struct {
		name, value string
		to          *[]int
	}{{"-conns", *conns, &c.conns}, {"-fleet-conns", *fleetConns, &c.fleetConns}} {
		for _, s := range list(f.value) {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				fmt.Fprintln(os.Stderr, "loadbench: bad", f.name, f.value)
				os.Exit(2)
			}
			*f.to = append(*f.to, n)
		}
	}
	if c.command == "" {
		c.command = commandLine()
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(1)
	}
}

func run(c config) error {
	var before *report.Before
	if c.before != "" {
		d, err := readData(c.before)
		if err != nil {
			return err
		}
		before = &report.Before{Label: c.beforeLabel, Data: d}
	}
	if c.from != "" {
		d, err := readData(c.from)
		if err != nil {
			return err
		}
		if before != nil {
			d.Before = before
		}
		return (&bench{cfg: c, data: *d}).write()
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	fleet, err := checkFleet(ctx, c.fleetKinds())
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "loadbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b := &bench{cfg: c, dir: dir, ctx: ctx}
	b.data.Machine = machine(c.command)
	b.data.Setup = report.Setup{
		Mode: pick(c.quick, "quick", "full"), Reps: c.reps, Warmup: c.warmup, Duration: c.duration,
		Conns: c.conns, TargetConns: targetConns(c.conns), InProcDuration: c.inprocDuration,
		ScaleSmall: c.scaleSmall, ScaleBig: c.scaleBig, ScaleDuration: c.scaleDuration,
		MemMaxRecords: c.memMaxRecords, Ablation: string(c.ablation),
	}
	if len(fleet) > 0 {
		b.data.Setup.Fleet = &report.Fleet{Servers: fleet, Conns: c.fleetConns, TargetConns: targetConns(c.fleetConns),
			Pool: c.fleetPool}
	}
	started := time.Now()
	steps := []struct {
		name string
		f    func() error
	}{
		{"loopback", b.loopback},
		{"inproc", b.inproc},
		{"scale", b.scale},
		{"purge", b.purge},
		{"profile", b.profile},
	}
	for _, s := range steps {
		if !c.sections[s.name] || (s.name == "profile" && c.profileDir == "") {
			continue
		}
		if ctx.Err() != nil {
			b.note("section %s skipped: the -timeout of %s ran out", s.name, c.timeout)
			continue
		}
		b.logf("== %s", s.name)
		t := time.Now()
		if err := s.f(); err != nil {
			b.note("section %s failed: %v", s.name, err)
		}
		b.logf("== %s took %s", s.name, time.Since(t).Round(time.Second))
	}
	b.data.Machine.Took = time.Since(started)
	b.data.Machine.LoadEnd = loadAverage()
	b.data.Before = before
	return b.write()
}

// readData reads the raw figures a run wrote with -json.
func readData(path string) (*report.Data, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d report.Data
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &d, nil
}

func (b *bench) write() error {
	c := b.cfg
	link := c.chartLink
	if link == "" && c.chart != "" {
		link = c.chart
		if rel, err := filepath.Rel(filepath.Dir(absPath(c.out)), absPath(c.chart)); err == nil {
			link = filepath.ToSlash(rel)
		}
	}
	if c.chart != "" {
		if err := writeFile(c.chart, []byte(report.SVG(&b.data))); err != nil {
			return err
		}
	}
	if c.json != "" {
		j, err := json.MarshalIndent(&b.data, "", "  ")
		if err != nil {
			return err
		}
		if err := writeFile(c.json, j); err != nil {
			return err
		}
	}
	if c.targets != "" {
		if err := writeFile(c.targets, []byte(report.TargetsMarkdown(&b.data))); err != nil {
			return err
		}
	}
	md := report.Markdown(&b.data, link)
	if c.out == "-" {
		_, err := os.Stdout.WriteString(md)
		return err
	}
	if err := writeFile(c.out, []byte(md)); err != nil {
		return err
	}
	b.logf("report written to %s", c.out)
	return nil
}

// writeFile writes b to path, creating its directory (docs/img, say).
func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// targetConns is the concurrency the targets and the summary are read at: 16, or
// the nearest measured.
func targetConns(conns []int) int {
	best := 0
	for _, n := range conns {
		if best == 0 || abs(n-16) < abs(best-16) {
			best = n
		}
	}
	return best
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

func pick[T any](quick bool, q, f T) T {
	if quick {
		return q
	}
	return f
}

func list(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

func set(s string) map[string]bool {
	m := map[string]bool{}
	for _, x := range list(s) {
		m[x] = true
	}
	return m
}
