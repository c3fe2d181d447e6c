package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/bench/internal/report"
)

// bench is one invocation's state.
type bench struct {
	cfg  config
	dir  string
	ctx  context.Context
	data report.Data
	seq  int // child directories
}

func (b *bench) logf(format string, args ...any) {
	if b.cfg.verbose {
		fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
	}
}

// note records a remark in the report and logs it.
func (b *bench) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.data.Notes = append(b.data.Notes, msg)
	fmt.Fprintln(os.Stderr, "loadbench:", msg)
}

// childDir returns a fresh directory for one child.
func (b *bench) childDir() (string, error) {
	b.seq++
	d := filepath.Join(b.dir, "c"+strconv.Itoa(b.seq))
	return d, os.MkdirAll(d, 0o755)
}

// serveArgs returns the arguments of a serving child.
func (b *bench) serveArgs(spec, dir string, purge time.Duration) []string {
	return []string{"-child", "serve", "-child-spec", spec, "-child-dir", dir,
		"-child-max-records", strconv.Itoa(b.cfg.memMaxRecords),
		"-child-purge-interval", purge.String(), "-child-pool", strconv.Itoa(b.cfg.fleetPool),
		"-child-ablate", string(b.cfg.ablation)}
}

type addrReply struct{ Addr string }

// startServer starts a serving child for spec.
func (b *bench) startServer(spec string, purge time.Duration) (*child, error) {
	dir, err := b.childDir()
	if err != nil {
		return nil, err
	}
	var a addrReply
	c, err := startChild(b.ctx, spec, b.serveArgs(spec, dir, purge), &a)
	if err != nil {
		return nil, err
	}
	c.addr = a.Addr
	return c, nil
}

func (c *child) reset() error {
	var a addrReply
	if err := c.call(&a, "reset"); err != nil {
		return err
	}
	c.addr = a.Addr
	return nil
}

// prefix returns a fresh key prefix for a run.
func prefix() uint32 {
	for {
		if p := rand.Uint32(); p != 0xf111f111 && p != 0 {
			return p
		}
	}
}

func machine(command string) report.Machine {
	return report.Machine{
		CPUs:      runtime.NumCPU(),
		CPU:       cpuModel(),
		GoVersion: runtime.Version(),
		OS:        runtime.GOOS + "/" + runtime.GOARCH,
		Command:   command,
		Started:   time.Now(),
		LoadStart: loadAverage(),
	}
}

// loadAverage returns the 1, 5 and 15 minute load averages of
// /proc/loadavg, or "" where there is none.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// cpuModel reads the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown (" + runtime.GOARCH + ")"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown (" + runtime.GOARCH + ")"
}

// commandLine is the command as the user typed it, as far as it can be
// told: under go run the binary is a temporary file.
func commandLine() string {
	args := make([]string, 0, len(os.Args))
	for _, a := range os.Args[1:] {
		if strings.ContainsAny(a, " \t'\"$") {
			a = strconv.Quote(a)
		}
		args = append(args, a)
	}
	name := filepath.Base(os.Args[0])
	if strings.Contains(os.Args[0], "go-build") {
		name = "go run ./bench/cmd/loadbench"
	}
	return strings.TrimSpace(name + " " + strings.Join(args, " "))
}
