package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A run that ends with a stale mutant (status 1) removes its worktree, as
// a run that kills every mutant does: earlier, os.Exit skipped the
// deferred removal and left a registered worktree behind each time.
func TestRunLeavesNoWorktree(t *testing.T) {
	repo := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	git("init", "-q")
	if err := os.WriteFile(filepath.Join(repo, "a.go"), []byte("package a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(repo, "mutants.txt")
	stale := "id: stale\nfile: a.go\ntest: ./...\nold:\nnot in the file\nnew:\nx\nend\n"
	if err := os.WriteFile(list, []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", ".")
	git("commit", "-q", "-m", "a")
	t.Chdir(repo)
	if got := run([]string{"-list", list}); got != 1 {
		t.Fatalf("run with a stale mutant returned %d, want 1", got)
	}
	if wt := strings.TrimSpace(git("worktree", "list")); strings.Count(wt, "\n") != 0 {
		t.Fatalf("worktrees left after the run:\n%s", wt)
	}
}

// -sim runs a mutant against the simulation of the module holding its
// file: core/idemsim for the root module, the package at the root of a
// store module with a TestSim, none for a module without one.
func TestSimulationOfAModule(t *testing.T) {
	root := t.TempDir()
	write := func(path, text string) {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/root\n")
	write("core/renewer.go", "package core\n")
	write("stores/kv/go.mod", "module example.com/kv\n")
	write("stores/kv/sim_test.go", "package kv\n\nfunc TestSim(t *testing.T) {}\n")
	write("stores/kv/store.go", "package kv\n")
	write("adapters/web/go.mod", "module example.com/web\n")
	write("adapters/web/middleware.go", "package web\n")
	for file, want := range map[string]string{
		"core/renewer.go":            "./core/idemsim",
		"stores/kv/store.go":         ".",
		"adapters/web/middleware.go": "",
	} {
		if got := simulation(root, file); got != want {
			t.Errorf("simulation of %s = %q, want %q", file, got, want)
		}
	}
}
