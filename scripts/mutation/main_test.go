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
