package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/bench/internal/servers"
)

func TestTargetConnsIsSixteenOrTheNearest(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want int
	}{{[]int{1, 16, 64}, 16}, {[]int{16}, 16}, {[]int{1, 64}, 1}, {[]int{8, 32}, 8}, {[]int{64}, 64}} {
		if got := targetConns(c.in); got != c.want {
			t.Errorf("targetConns(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestKindsRotateAndBuiltinOnlyOnFiber: every configuration runs in every
// repetition, none always first, and Fiber's middleware only on Fiber.
func TestKindsRotateAndBuiltinOnlyOnFiber(t *testing.T) {
	b := &bench{cfg: config{kinds: []string{"bare", "mem", "sqlite", "insert", "builtin"}}}
	all := &bench{cfg: config{kinds: servers.Kinds}}
	if ks := all.kindsOf("gin", 0); slices.ContainsFunc(ks, servers.Fleet) {
		t.Errorf("gin: %v, want no fleet kind (net/http only)", ks)
	}
	if ks := b.kindsOf("gin", 0); slices.Contains(ks, "builtin") || len(ks) != 4 {
		t.Errorf("gin: %v", ks)
	}
	firsts := map[string]bool{}
	for rep := range 5 {
		ks := b.kindsOf("fiber", rep)
		sorted := slices.Sorted(slices.Values(ks))
		if !slices.Equal(sorted, []string{"bare", "builtin", "insert", "mem", "sqlite"}) {
			t.Fatalf("rep %d: %v", rep, ks)
		}
		firsts[ks[0]] = true
	}
	if len(firsts) != 5 {
		t.Errorf("over 5 repetitions the first configurations were %v, want each once", firsts)
	}
	b.cfg.kinds = []string{"mem"}
	if ks := b.kindsOf("echo", 3); !slices.Equal(ks, []string{"mem"}) {
		t.Errorf("-kinds mem: %v", ks)
	}
}

func TestTail(t *testing.T) {
	tl := &tail{max: 8}
	tl.Write([]byte("hello "))
	tl.Write([]byte("world"))
	if got := tl.String(); got != "lo world" {
		t.Errorf("tail = %q, want the last 8 bytes", got)
	}
}

func TestTrimPprof(t *testing.T) {
	out := "File: x\nType: cpu\nShowing nodes accounting for 1s\n      flat  flat%\n"
	if got := trimPprof([]byte(out), nil); !strings.HasPrefix(got, "Showing nodes") {
		t.Errorf("trimPprof kept the header: %q", got)
	}
}

func TestLastLines(t *testing.T) {
	if got := lastLines("a\nb\nc\nd\n", 2); got != "c | d" {
		t.Errorf("lastLines = %q", got)
	}
	if got := lastLines("", 3); got != "" {
		t.Errorf("lastLines of nothing = %q", got)
	}
}

// TestFleetKindsNeedTheirServers: the configurations on a database server
// are measured on net/http, on loopback, at their own workloads and
// concurrencies; a run that asks for one without its server fails, naming
// what to start, before it measures anything.
func TestFleetKindsNeedTheirServers(t *testing.T) {
	c := config{kinds: servers.Kinds, frameworks: []string{"nethttp", "gin"}, sections: set("loopback,inproc"),
		workloads: []string{"First", "Conflict"}, conns: []int{16}, fleetWorkloads: []string{"First", "Replay"}, fleetConns: []int{16, 64}}
	if got := c.fleetKinds(); !slices.Equal(got, []string{"postgres", "pgtx", "pginsert", "redis", "setnx"}) {
		t.Errorf("fleet kinds %v", got)
	}
	b := &bench{cfg: c}
	for _, m := range []struct {
		kind, workload string
		conns          int
		want           bool
	}{
		{"postgres", "Replay", 64, true}, {"postgres", "Conflict", 16, false}, {"setnx", "First", 16, true},
		{"mem", "First", 64, false}, {"mem", "Conflict", 16, true}, {"mem", "Replay", 16, false},
	} {
		if got := b.measures(m.kind, m.workload, m.conns); got != m.want {
			t.Errorf("measures(%s, %s, %d) = %v", m.kind, m.workload, m.conns, got)
		}
	}
	if w, n := b.loopbackGrid(); !slices.Equal(w, []string{"First", "Conflict", "Replay"}) || !slices.Equal(n, []int{16, 64}) {
		t.Errorf("loopback grid %v at %v", w, n)
	}
	for _, without := range []config{
		{kinds: servers.Kinds, frameworks: []string{"gin"}, sections: c.sections, fleetWorkloads: c.fleetWorkloads, fleetConns: c.fleetConns},
		{kinds: servers.Kinds, frameworks: c.frameworks, sections: set("inproc,scale"), fleetWorkloads: c.fleetWorkloads, fleetConns: c.fleetConns},
		{kinds: []string{"bare", "mem"}, frameworks: c.frameworks, sections: c.sections, fleetWorkloads: c.fleetWorkloads, fleetConns: c.fleetConns},
	} {
		if got := without.fleetKinds(); len(got) != 0 {
			t.Errorf("%+v: fleet kinds %v, want none", without, got)
		}
	}
	p := config{sections: set("profile"), profileDir: "prof", profileConfigs: []string{"nethttp/mem", "nethttp/redis"}}
	if got := p.fleetKinds(); !slices.Equal(got, []string{"redis"}) {
		t.Errorf("profiled fleet kinds %v", got)
	}

	t.Setenv(servers.PostgresEnv, "")
	t.Setenv(servers.RedisEnv, "")
	if _, err := checkFleet(t.Context(), nil); err != nil {
		t.Errorf("no fleet kind asked for: %v", err)
	}
	for _, k := range []struct{ kind, env, start string }{
		{"pginsert", servers.PostgresEnv, "start_postgres"}, {"setnx", servers.RedisEnv, "start_redis"},
	} {
		_, err := checkFleet(t.Context(), []string{k.kind})
		if err == nil || !strings.Contains(err.Error(), k.env) || !strings.Contains(err.Error(), k.start) ||
			!strings.Contains(err.Error(), "make bench-quick") {
			t.Errorf("%s without its server: %v, want an error naming %s and how to start it", k.kind, err, k.env)
		}
	}
}
