package main

import (
	"slices"
	"strings"
	"testing"
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
