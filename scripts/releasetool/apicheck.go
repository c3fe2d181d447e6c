package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

const (
	// BaselineFile names the commit whose API a module that has never been
	// released is compared with.
	BaselineFile = "api/baseline"
	// AcceptedFile lists the incompatible API changes accepted since the
	// last release, one per line, exactly as apicheck reports them.
	AcceptedFile = "api/incompatible.txt"
)

// apiDiff is what apidiff reports for one module, each change qualified
// with the module path: "github.com/idemkit/idemkit/core.Storable: removed".
type apiDiff struct {
	incompatible, compatible []string
}

// parseAPIDiff reads the report of `apidiff -m OLD NEW` for module modPath.
func parseAPIDiff(modPath, report string) (apiDiff, error) {
	var d apiDiff
	var section *[]string
	for _, line := range strings.Split(report, "\n") {
		switch {
		case line == "Incompatible changes:":
			section = &d.incompatible
		case line == "Compatible changes:":
			section = &d.compatible
		case strings.HasPrefix(line, "- "):
			if section == nil {
				return d, fmt.Errorf("apidiff: a change outside any section: %q", line)
			}
			*section = append(*section, qualify(modPath, strings.TrimPrefix(line, "- ")))
		case strings.TrimSpace(line) == "":
		default:
			return d, fmt.Errorf("apidiff: unexpected line %q", line)
		}
	}
	return d, nil
}

// qualify names a change by its package's full path: apidiff writes
// "./core.Storable" for a package below the module's root, "WithScope"
// for one in the root package, and "package <path>" for a whole package.
func qualify(modPath, change string) string {
	if strings.HasPrefix(change, "package ") {
		return change // a whole package, named by its path
	}
	if rest, ok := strings.CutPrefix(change, "./"); ok {
		return modPath + "/" + rest
	}
	return modPath + "." + change
}

// readList reads a file of one entry per line, with # comments; a
// missing file is an empty list.
func readList(name string) ([]string, error) {
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// clearAccepted empties AcceptedFile, keeping its comments, and reports
// whether it changed.
func clearAccepted(root string) (bool, error) {
	name := filepath.Join(root, AcceptedFile)
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	var kept bytes.Buffer
	changed := false
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			changed = true
			continue
		}
		kept.WriteString(l)
	}
	if !changed {
		return false, nil
	}
	return true, os.WriteFile(name, kept.Bytes(), 0o644)
}

// moduleCheck is the verdict on one module's API.
type moduleCheck struct {
	m        *module
	base     string // the tag, or "baseline <commit>"
	lastTag  string // "" when compared with the baseline
	last     string // the version of lastTag
	diff     apiDiff
	skipped  string // why nothing was compared
	problems []string
}

// judge applies the versioning rules to a module's changes, given the
// incompatible changes accepted in AcceptedFile.
func (c *moduleCheck) judge(accepted map[string]bool) {
	var unlisted []string
	for _, ch := range c.diff.incompatible {
		if !accepted[ch] {
			unlisted = append(unlisted, ch)
		}
	}
	if len(unlisted) > 0 {
		c.problems = append(c.problems, "incompatible changes not listed in "+AcceptedFile+":\n      "+strings.Join(unlisted, "\n      "))
	}
	if c.lastTag == "" || c.m.Next == "-" {
		return // never released: nobody depends on a version yet
	}
	last, next := mustSemver(c.last), mustSemver(c.m.Next)
	switch {
	case len(c.diff.incompatible) > 0 && last.major >= 1:
		c.problems = append(c.problems, fmt.Sprintf("%s is v1 or later: an incompatible change needs a new major version, a module path ending in /v%d", c.lastTag, last.major+1))
	case len(c.diff.incompatible) > 0 && next.major == 0 && next.minor <= last.minor:
		c.problems = append(c.problems, fmt.Sprintf("incompatible changes since %s need at least v0.%d.0 in %s (it says %s)", c.lastTag, last.minor+1, VersionsFile, c.m.Next))
	case len(c.diff.compatible) > 0 && next.major == last.major && next.minor <= last.minor:
		c.problems = append(c.problems, fmt.Sprintf("API added since %s needs at least v%d.%d.0 in %s (it says %s)", c.lastTag, last.major, last.minor+1, VersionsFile, c.m.Next))
	}
}

// apicheck compares the exported API of every module with that of its
// last release (its highest tag), or, for a module never released, with
// the commit in BaselineFile, and fails on an incompatible change that
// AcceptedFile does not list or the next version does not allow. The
// compatible changes are counted; they are listed one by one for a module
// whose check fails, and for every module when verbose.
func apicheck(root, apidiff string, verbose bool, out io.Writer) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	r, err := loadRepo(root)
	if err != nil {
		return err
	}
	tags, err := gitLines(root, "tag", "--list")
	if err != nil {
		return err
	}
	base, err := readList(filepath.Join(root, BaselineFile))
	if err != nil {
		return err
	}
	if len(base) != 1 {
		return fmt.Errorf("%s must hold one commit", BaselineFile)
	}
	baseline := base[0]
	if _, err := gitLines(root, "cat-file", "-e", baseline+"^{commit}"); err != nil {
		return fmt.Errorf("the baseline commit %s (%s) is not in this clone; fetch the whole history (git fetch --unshallow --tags): %v", baseline, BaselineFile, err)
	}
	acceptedList, err := readList(filepath.Join(root, AcceptedFile))
	if err != nil {
		return err
	}
	accepted := map[string]bool{}
	for _, a := range acceptedList {
		accepted[a] = true
	}

	tmp, err := os.MkdirTemp("", "idemkit-apicheck-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	trees, err := newTreeCache()
	if err != nil {
		return err
	}
	defer trees.prune()

	var checks []*moduleCheck
	reported := map[string]bool{}
	for i, m := range r.Modules {
		c := &moduleCheck{m: m}
		checks = append(checks, c)
		ref := baseline
		c.last, c.lastTag = latestTag(tags, m.TagPrefix())
		c.base = "baseline " + short(baseline)
		if c.lastTag != "" {
			ref, c.base = c.lastTag, c.lastTag
		}
		newDir := filepath.Join(root, filepath.FromSlash(m.Dir))
		tree, err := trees.get(root, ref)
		if err != nil {
			return err
		}
		oldDir := filepath.Join(tree, filepath.FromSlash(m.Dir))
		var oldMod struct{ Module struct{ Path string } }
		if _, err := os.Stat(filepath.Join(oldDir, "go.mod")); err != nil {
			c.skipped = "new module: no API to compare yet"
			continue
		}
		if err := goJSON(oldDir, &oldMod, "mod", "edit", "-json"); err != nil {
			return err
		}
		if oldMod.Module.Path != m.Path {
			c.skipped = "module renamed from " + oldMod.Module.Path + ": no API to compare"
			continue
		}
		oldEnv, newEnv := buildEnv(r, m, tree), buildEnv(r, m, root)
		oldPkgs, err := importable(oldDir, oldEnv)
		if err != nil {
			return fmt.Errorf("%s at %s: %v", m.Dir, c.base, err)
		}
		newPkgs, err := importable(newDir, newEnv)
		if err != nil {
			return fmt.Errorf("%s: %v", m.Dir, err)
		}
		if oldPkgs+newPkgs == 0 {
			c.skipped = "no API: only commands, internal packages and tests"
			continue
		}
		oldAPI := filepath.Join(tmp, fmt.Sprintf("%d.old.api", i))
		newAPI := filepath.Join(tmp, fmt.Sprintf("%d.new.api", i))
		if err := exportAPI(apidiff, oldDir, oldEnv, m.Path, oldAPI); err != nil {
			return fmt.Errorf("%s at %s: %v", m.Dir, c.base, err)
		}
		if err := exportAPI(apidiff, newDir, newEnv, m.Path, newAPI); err != nil {
			return fmt.Errorf("%s: %v", m.Dir, err)
		}
		cmd := exec.Command(apidiff, "-m", oldAPI, newAPI)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		report, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("apidiff %s: %v: %s", m.Dir, err, stderr.Bytes())
		}
		if c.diff, err = parseAPIDiff(m.Path, string(report)); err != nil {
			return fmt.Errorf("%s: %v", m.Dir, err)
		}
		for _, ch := range c.diff.incompatible {
			reported[ch] = true
		}
		c.judge(accepted)
	}

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "API of each module against its last release (or the baseline, before its first):")
	failed := false
	for _, c := range checks {
		verdict := c.skipped
		if verdict == "" {
			verdict = fmt.Sprintf("%d incompatible (%d accepted), %d compatible changes", len(c.diff.incompatible), countAccepted(c.diff.incompatible, accepted), len(c.diff.compatible))
		}
		status := "ok"
		if len(c.problems) > 0 {
			status, failed = "FAIL", true
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", status, c.m.Dir, c.base, verdict)
	}
	tw.Flush()
	unlisted := 0
	for _, c := range checks {
		if !verbose && len(c.problems) == 0 {
			unlisted += len(c.diff.compatible)
			c.diff.compatible = nil
		}
		for _, ch := range c.diff.compatible {
			fmt.Fprintf(out, "    added or compatible: %s\n", ch)
		}
		for _, p := range c.problems {
			fmt.Fprintf(out, "  %s: %s\n", c.m.Dir, p)
		}
	}
	var stale []string
	for _, a := range acceptedList {
		if !reported[a] {
			stale = append(stale, a)
		}
	}
	if len(stale) > 0 {
		failed = true
		fmt.Fprintf(out, "  %s lists changes that are no longer made; remove:\n      %s\n", AcceptedFile, strings.Join(stale, "\n      "))
	}
	if unlisted > 0 {
		fmt.Fprintf(out, "  (%d compatible changes in modules that allow them; scripts/apicheck -v lists them)\n", unlisted)
	}
	if failed {
		fmt.Fprintf(out, "\nAn incompatible change breaks every program that uses the old API. If it is intended,\n"+
			"add its line to %s, say so in CHANGELOG.md, and give the module a next version\n"+
			"in %s that allows it (see CONTRIBUTING.md, \"API compatibility\").\n", AcceptedFile, VersionsFile)
		return errors.New("API check failed")
	}
	return nil
}

func countAccepted(changes []string, accepted map[string]bool) int {
	n := 0
	for _, c := range changes {
		if accepted[c] {
			n++
		}
	}
	return n
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// buildEnv is the environment in which module m of the tree at dir is
// loaded. Within the tree's workspace, as the tests build it, so that the
// dependencies' versions are those the build cache already holds; alone
// (GOWORK=off, with its replace directives) when the tree's go.work does
// not use it, or when its path is a prefix of another module's, since
// apidiff would then take the other module's packages for its own.
func buildEnv(r *repo, m *module, dir string) []string {
	alone := append(os.Environ(), "GOWORK=off")
	for _, o := range r.Modules {
		if o != m && strings.HasPrefix(o.Path, m.Path+"/") {
			return alone
		}
	}
	var work struct{ Use []struct{ DiskPath string } }
	if err := goJSON(dir, &work, "work", "edit", "-json"); err != nil {
		return alone
	}
	for _, u := range work.Use {
		if path.Clean(filepath.ToSlash(u.DiskPath)) == m.Dir {
			return append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"))
		}
	}
	return alone
}

// importable counts the packages of the module in dir that other code
// may import: neither commands, nor internal, nor made of tests only.
func importable(dir string, env []string) (int, error) {
	cmd := exec.Command("go", "list", "-f", "{{.Name}} {{.ImportPath}} {{len .GoFiles}}", "./...")
	cmd.Dir = dir
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("go list: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	n := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] == "main" || f[2] == "0" {
			continue
		}
		if p := "/" + f[1] + "/"; strings.Contains(p, "/internal/") {
			continue
		}
		n++
	}
	return n, nil
}

// exportAPI writes the export data of module modPath, whose directory is
// dir, to file.
func exportAPI(apidiff, dir string, env []string, modPath, file string) error {
	cmd := exec.Command(apidiff, "-m", "-w", file, modPath)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil {
		_, err = os.Stat(file) // apidiff may report a load error and still exit 0
	}
	if err != nil {
		var msgs []string
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			if !strings.HasPrefix(sc.Text(), "Ignoring internal package") {
				msgs = append(msgs, sc.Text())
			}
		}
		return fmt.Errorf("apidiff -w: %v\n%s", err, strings.Join(msgs, "\n"))
	}
	return nil
}

// treeCache keeps the trees of past commits in the user's cache
// directory, one per commit, so that the build cache, whose keys include
// a package's directory, serves their packages again on the next run.
type treeCache struct {
	dir  string
	used map[string]string // ref -> tree
}

func newTreeCache() (*treeCache, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "idemkit-apicheck")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &treeCache{dir: dir, used: map[string]string{}}, nil
}

// get returns the directory holding the tree of ref, extracting it once.
func (tc *treeCache) get(root, ref string) (string, error) {
	if t, ok := tc.used[ref]; ok {
		return t, nil
	}
	commit, err := gitLines(root, "rev-parse", ref+"^{commit}")
	if err != nil {
		return "", err
	}
	tree := filepath.Join(tc.dir, commit[0])
	if _, err := os.Stat(filepath.Join(tree, ".complete")); err != nil {
		os.RemoveAll(tree)
		tmp, err := os.MkdirTemp(tc.dir, "partial-")
		if err != nil {
			return "", err
		}
		if err := extract(root, ref, tmp); err != nil {
			os.RemoveAll(tmp)
			return "", err
		}
		if err := os.WriteFile(filepath.Join(tmp, ".complete"), nil, 0o644); err != nil {
			return "", err
		}
		if err := os.Rename(tmp, tree); err != nil {
			os.RemoveAll(tmp)
			return "", err
		}
	}
	tc.used[ref] = tree
	return tree, nil
}

// prune removes the trees this run did not use.
func (tc *treeCache) prune() {
	keep := map[string]bool{}
	for _, t := range tc.used {
		keep[t] = true
	}
	entries, _ := os.ReadDir(tc.dir)
	for _, e := range entries {
		if p := filepath.Join(tc.dir, e.Name()); !keep[p] {
			os.RemoveAll(p)
		}
	}
}

// extract writes the tree of commit-ish ref to dir, from git archive.
func extract(root, ref, dir string) error {
	cmd := exec.Command("git", "archive", "--format=tar", ref)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	tr := tar.NewReader(pipe)
	var extractErr error
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			extractErr = err
			break
		}
		name := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(name, filepath.Clean(dir)+string(filepath.Separator)) {
			extractErr = fmt.Errorf("git archive: path %q outside the tree", h.Name)
			break
		}
		switch h.Typeflag {
		case tar.TypeDir:
			extractErr = os.MkdirAll(name, 0o755)
		case tar.TypeReg:
			extractErr = writeFile(name, tr, os.FileMode(h.Mode)&0o755|0o600)
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				extractErr = err
			} else {
				extractErr = os.Symlink(h.Linkname, name)
			}
		}
		if extractErr != nil {
			break
		}
	}
	io.Copy(io.Discard, pipe)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %v: %s", ref, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return extractErr
}

func writeFile(name string, r io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
