// Command mutation plants small, realistic bugs (mutants) into a copy of
// the repository one at a time, runs the tests that should notice each,
// and prints which were caught (killed) and which were not (survived),
// with the score. `make mutation` runs it; it is not part of CI.
//
//	go run ./scripts/mutation [-list scripts/mutation/mutants.txt] [-only ID,...] [-timeout 5m] [-sim]
//
// With -sim, each mutant is run against the deterministic simulation alone
// (TestSim of the module holding its file: core/idemsim for the root
// module, the store modules' own), with CI's budget of 20 s of seeds per
// store, instead of its own tests: it tells how many mutants the
// simulation catches by itself. A mutant in a module without a simulation
// is reported "no-sim" and left out of that score.
//
// Each mutant in the list is a block:
//
//	id: fencing/memstore-complete
//	file: core/memstore/memstore.go
//	test: ./core/...            (packages, relative to the module holding file)
//	run: TestStore|TestSim      (optional -run pattern)
//	equivalent: why             (optional: a mutant known to change nothing observable)
//	old:
//	<lines, exactly as in the file, once>
//	new:
//	<lines>
//	end
//
// A mutant whose old text is not found exactly once is reported stale:
// the list must follow the code. The copy is a fresh git worktree of HEAD
// in a temporary directory, so the working tree is never touched.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

type mutant struct {
	id, file, test, run, equivalent string
	old, new                        string
}

func main() { os.Exit(run(os.Args[1:])) }

// run is the command on args; it returns the exit status: 0 every mutant
// killed (or equivalent), 1 one survived or is stale, 2 it could not run.
// The worktree is removed whatever the outcome.
func run(args []string) int {
	fs := flag.NewFlagSet("mutation", flag.ContinueOnError)
	list := fs.String("list", "scripts/mutation/mutants.txt", "the mutants")
	only := fs.String("only", "", "comma-separated ids to run (default all)")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound on the tests of one mutant (a mutant that hangs them is killed)")
	short := fs.Bool("short", false, "run the tests with -short (no database servers: their tests are skipped)")
	sim := fs.Bool("sim", false, "run each mutant against the simulation alone (TestSim of its module, 20 s of seeds per store) instead of its tests")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	mutants, err := parse(*list)
	if err != nil {
		return fail(err)
	}
	if *only != "" {
		keep := map[string]bool{}
		for _, id := range strings.Split(*only, ",") {
			keep[strings.TrimSpace(id)] = true
		}
		var sel []mutant
		for _, m := range mutants {
			if keep[m.id] {
				sel = append(sel, m)
			}
		}
		mutants = sel
	}
	dir, cleanup, err := worktree()
	if err != nil {
		return fail(err)
	}
	defer cleanup()

	var killed, survived, stale, equivalent, nosim int
	var survivors []string
	start := time.Now()
	for i, m := range mutants {
		fmt.Printf("[%d/%d] %-44s ", i+1, len(mutants), m.id)
		if *sim {
			pkg := simulation(dir, m.file)
			if pkg == "" {
				fmt.Printf("%-10s %s\n", "no-sim", "its module has no simulation")
				nosim++
				continue
			}
			m.test, m.run = pkg, "^TestSim$"
		}
		verdict, detail := try(dir, m, *timeout, *short, *sim)
		fmt.Printf("%-10s %s\n", verdict, detail)
		switch verdict {
		case "killed":
			killed++
		case "survived":
			if m.equivalent != "" {
				equivalent++
			} else {
				survived++
				survivors = append(survivors, m.id)
			}
		default:
			stale++
		}
	}
	total := killed + survived
	fmt.Printf("\n%d mutants in %v: %d killed, %d survived, %d equivalent (survived, with a reason in the list), %d stale\n",
		len(mutants), time.Since(start).Round(time.Second), killed, survived, equivalent, stale)
	if *sim {
		fmt.Printf("the simulation alone: %d mutants in modules without one left out\n", nosim)
	}
	if total > 0 {
		fmt.Printf("score: %d/%d killed (%.1f%%), equivalent mutants left out\n", killed, total, 100*float64(killed)/float64(total))
	}
	for _, id := range survivors {
		fmt.Printf("survivor: %s\n", id)
	}
	if stale > 0 || survived > 0 {
		return 1
	}
	return 0
}

// simulation returns the package, relative to its module, whose TestSim
// simulates the module holding file in the repository at root, or "" if
// that module has none.
func simulation(root, file string) string {
	modDir, err := moduleDir(root, file)
	if err != nil {
		return ""
	}
	if modDir == root {
		return "./core/idemsim"
	}
	if b, err := os.ReadFile(filepath.Join(modDir, "sim_test.go")); err == nil && strings.Contains(string(b), "func TestSim(") {
		return "."
	}
	return ""
}

// simBudget is CI's budget of new seeds per store (scripts/test-all).
const simBudget = "20s"

// try plants m in the worktree at dir, runs its tests (with sim, the
// simulation with CI's budget), and restores the file.
func try(dir string, m mutant, timeout time.Duration, short, sim bool) (verdict, detail string) {
	path := filepath.Join(dir, m.file)
	orig, err := os.ReadFile(path)
	if err != nil {
		return "stale", err.Error()
	}
	if n := strings.Count(string(orig), m.old); n != 1 {
		return "stale", fmt.Sprintf("old text found %d times in %s", n, m.file)
	}
	mutated := strings.Replace(string(orig), m.old, m.new, 1)
	if err := os.WriteFile(path, []byte(mutated), 0o644); err != nil {
		return "stale", err.Error()
	}
	defer os.WriteFile(path, orig, 0o644)

	modDir, err := moduleDir(dir, m.file)
	if err != nil {
		return "stale", err.Error()
	}
	args := []string{"test", "-count=1", "-failfast"}
	if short {
		args = append(args, "-short")
	}
	if m.run != "" {
		args = append(args, "-run", m.run)
	}
	args = append(args, strings.Fields(m.test)...)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"))
	if sim {
		cmd.Env = append(cmd.Env, "IDEMKIT_SIMTIME="+simBudget)
	}
	out, err := cmd.CombinedOutput()
	note := ""
	if m.equivalent != "" {
		note = "(equivalent: " + m.equivalent + ")"
	}
	switch {
	case ctx.Err() != nil:
		return "killed", "tests did not finish in " + timeout.String()
	case err == nil:
		return "survived", note
	case strings.Contains(string(out), "build failed") || strings.Contains(string(out), "[setup failed]"):
		return "stale", "does not build: " + firstLine(string(out), "")
	}
	return "killed", firstLine(string(out), "--- FAIL")
}

// moduleDir returns the directory of the module holding file.
func moduleDir(root, file string) (string, error) {
	d := filepath.Dir(filepath.Join(root, file))
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if d == root || d == "/" {
			return "", errors.New("no go.mod above " + file)
		}
		d = filepath.Dir(d)
	}
}

func firstLine(out, prefix string) string {
	for _, l := range strings.Split(out, "\n") {
		if t := strings.TrimSpace(l); t != "" && strings.HasPrefix(t, prefix) {
			if len(t) > 100 {
				t = t[:100] + "..."
			}
			return t
		}
	}
	return ""
}

// worktree makes a detached git worktree of HEAD in a temporary directory.
func worktree() (string, func(), error) {
	dir, err := os.MkdirTemp("", "idemkit-mutation-")
	if err != nil {
		return "", nil, err
	}
	wt := filepath.Join(dir, "repo")
	if out, err := exec.Command("git", "worktree", "add", "--detach", wt, "HEAD").CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("git worktree add: %v: %s", err, out)
	}
	return wt, func() {
		_ = exec.Command("git", "worktree", "remove", "--force", wt).Run()
		_ = os.RemoveAll(dir)
	}, nil
}

// parse reads the list of mutants.
func parse(path string) ([]mutant, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ms []mutant
	var m *mutant
	var into *strings.Builder
	var oldB, newB strings.Builder
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		t := sc.Text()
		if into != nil {
			switch t {
			case "new:":
				into = &newB
				continue
			case "end":
				m.old = strings.TrimSuffix(oldB.String(), "\n")
				m.new = strings.TrimSuffix(newB.String(), "\n")
				ms = append(ms, *m)
				m, into = nil, nil
				continue
			}
			into.WriteString(t + "\n")
			continue
		}
		if strings.TrimSpace(t) == "" || strings.HasPrefix(t, "#") {
			continue
		}
		k, v, ok := strings.Cut(t, ":")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want key: value", path, line)
		}
		v = strings.TrimSpace(v)
		if k == "id" {
			m = &mutant{id: v}
			continue
		}
		if m == nil {
			return nil, fmt.Errorf("%s:%d: %s before id", path, line, k)
		}
		switch k {
		case "file":
			m.file = v
		case "test":
			m.test = v
		case "run":
			m.run = v
		case "equivalent":
			m.equivalent = v
		case "old":
			oldB.Reset()
			newB.Reset()
			into = &oldB
		default:
			return nil, fmt.Errorf("%s:%d: unknown key %q", path, line, k)
		}
	}
	return ms, sc.Err()
}

// fail reports why the command could not run, and returns its status.
func fail(err error) int {
	fmt.Fprintln(os.Stderr, "mutation:", err)
	return 2
}
