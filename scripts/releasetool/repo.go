package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// VersionsFile lists the next version of every module, by directory.
const VersionsFile = "versions.txt"

// module is one module of the workspace, as its go.mod says.
type module struct {
	Dir      string    // relative to the repository root, slash-separated; "." for the root
	Path     string    // module path
	Next     string    // next version, from versions.txt; "-" if never released
	Requires []modRef  // requires of other modules of the repository
	Replaces []modRepl // all replace directives
	level    int       // 0: requires no module of the repository
	deps     []*module // the modules of the repository it requires
}

type modRef struct{ Path, Version string }

type modRepl struct {
	Old, New modRef
}

// TagPrefix is what a tag of the module starts with before its version:
// "" for the root, "adapters/gin/" for the module in adapters/gin.
func (m *module) TagPrefix() string {
	if m.Dir == "." {
		return ""
	}
	return m.Dir + "/"
}

// Tag is the tag of version v of the module.
func (m *module) Tag(v string) string { return m.TagPrefix() + v }

// repo is the repository's modules, in dependency order.
type repo struct {
	Root    string
	Modules []*module // sorted by level, then directory
}

// goJSON runs a go subcommand that prints JSON, in dir, and decodes it.
func goJSON(dir string, v any, args ...string) error {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return json.Unmarshal(out, v)
}

// loadRepo reads go.work, every go.mod it uses and versions.txt, checks
// that they agree, and orders the modules so that each comes after every
// module of the repository it requires.
func loadRepo(root string) (*repo, error) {
	var work struct {
		Use []struct{ DiskPath string }
	}
	if err := goJSON(root, &work, "work", "edit", "-json"); err != nil {
		return nil, err
	}
	r := &repo{Root: root}
	byPath := map[string]*module{}
	for _, u := range work.Use {
		dir := path.Clean(filepath.ToSlash(u.DiskPath))
		var mod struct {
			Module  struct{ Path string }
			Require []modRef
			Replace []modRepl
		}
		if err := goJSON(root, &mod, "mod", "edit", "-json", path.Join(dir, "go.mod")); err != nil {
			return nil, err
		}
		m := &module{Dir: dir, Path: mod.Module.Path, Replaces: mod.Replace}
		for _, req := range mod.Require {
			m.Requires = append(m.Requires, modRef{req.Path, req.Version})
		}
		if byPath[m.Path] != nil {
			return nil, fmt.Errorf("go.work uses two modules named %s", m.Path)
		}
		byPath[m.Path] = m
		r.Modules = append(r.Modules, m)
	}
	rootMod := r.module(".")
	if rootMod == nil {
		return nil, fmt.Errorf("go.work does not use the repository's root module")
	}
	var problems []string
	for _, m := range r.Modules {
		if err := checkModulePath(rootMod.Path, m); err != nil {
			problems = append(problems, err.Error())
		}
		// Keep only the requires of repository modules, and check each is
		// replaced by its directory, so the module builds with GOWORK=off.
		var own []modRef
		for _, req := range m.Requires {
			dep := byPath[req.Path]
			if dep == nil {
				continue
			}
			own = append(own, req)
			m.deps = append(m.deps, dep)
			if err := checkReplace(m, dep); err != nil {
				problems = append(problems, err.Error())
			}
		}
		m.Requires = own
	}
	if err := r.readVersions(); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("the modules do not agree:\n  %s", strings.Join(problems, "\n  "))
	}
	if err := r.order(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *repo) module(dir string) *module {
	for _, m := range r.Modules {
		if m.Dir == dir {
			return m
		}
	}
	return nil
}

// checkModulePath checks that the module's path is the root's path and
// its directory, which is what lets the go command find a module of a
// subdirectory from a tag named after that directory.
func checkModulePath(rootPath string, m *module) error {
	want := rootPath
	if m.Dir != "." {
		want += "/" + m.Dir
	}
	// A major version kept on a branch adds /vN to the path, not the directory.
	if prefix, major, ok := splitMajor(m.Path); m.Path == want || ok && major >= 2 && prefix == want {
		return nil
	}
	return fmt.Errorf("%s/go.mod: module %s, but a module in that directory must be named %s", m.Dir, m.Path, want)
}

// splitMajor splits ".../v2" into ".../" and 2.
func splitMajor(p string) (prefix string, major int, ok bool) {
	i := strings.LastIndex(p, "/v")
	if i < 0 {
		return p, 0, false
	}
	if _, err := fmt.Sscanf(p[i+2:], "%d", &major); err != nil || fmt.Sprint(major) != p[i+2:] {
		return p, 0, false
	}
	return p[:i], major, true
}

// checkReplace checks that m replaces its requirement on dep with dep's
// directory, relative to m's.
func checkReplace(m, dep *module) error {
	rel, err := filepath.Rel(filepath.FromSlash(m.Dir), filepath.FromSlash(dep.Dir))
	if err != nil {
		return err
	}
	rel = filepath.ToSlash(rel)
	for _, rp := range m.Replaces {
		if rp.Old.Path != dep.Path {
			continue
		}
		if rp.Old.Version != "" || rp.New.Version != "" || path.Clean(rp.New.Path) != rel {
			return fmt.Errorf("%s/go.mod: replace %s => %s %s; want the directory %s, for every version", m.Dir, dep.Path, rp.New.Path, rp.New.Version, rel)
		}
		return nil
	}
	return fmt.Errorf("%s/go.mod requires %s but does not replace it with %s (needed to build with GOWORK=off)", m.Dir, dep.Path, rel)
}

// readVersions reads versions.txt: one "directory version" pair per line,
// # comments. Every module of go.work must be listed, once.
func (r *repo) readVersions() error {
	f, err := os.Open(filepath.Join(r.Root, VersionsFile))
	if err != nil {
		return err
	}
	defer f.Close()
	seen := map[string]bool{}
	var problems []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		at := fmt.Sprintf("%s:%d", VersionsFile, n)
		if len(fields) != 2 {
			problems = append(problems, at+": want a module directory and its next version")
			continue
		}
		dir, v := path.Clean(fields[0]), fields[1]
		m := r.module(dir)
		switch {
		case m == nil:
			problems = append(problems, fmt.Sprintf("%s: %s is not a module of go.work", at, dir))
			continue
		case seen[dir]:
			problems = append(problems, fmt.Sprintf("%s: %s is listed twice", at, dir))
			continue
		}
		seen[dir] = true
		if err := checkVersion(m, v); err != nil {
			problems = append(problems, at+": "+err.Error())
			continue
		}
		m.Next = v
	}
	if err := sc.Err(); err != nil {
		return err
	}
	for _, m := range r.Modules {
		if !seen[m.Dir] {
			problems = append(problems, fmt.Sprintf("%s: no version for %s (a module of go.work)", VersionsFile, m.Dir))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "\n  "))
	}
	return nil
}

// checkVersion checks that v is a version the module can have: semantic,
// and with a major version matching the module path's /vN suffix.
func checkVersion(m *module, v string) error {
	if v == "-" {
		return nil
	}
	sv, ok := parseSemver(v)
	if !ok {
		return fmt.Errorf("%s: %q is not a semantic version such as v0.1.0", m.Dir, v)
	}
	_, major, hasMajor := splitMajor(m.Path)
	switch {
	case sv.major >= 2 && (!hasMajor || major != sv.major):
		return fmt.Errorf("%s: version %s needs the module path to end in /v%d (it is %s)", m.Dir, v, sv.major, m.Path)
	case sv.major < 2 && hasMajor && major >= 2:
		return fmt.Errorf("%s: version %s does not match the module path %s", m.Dir, v, m.Path)
	}
	return nil
}

// order sorts the modules by level (0 for those that require no module of
// the repository, else one more than their deepest requirement), then by
// directory, and fails on a cycle.
func (r *repo) order() error {
	state := map[*module]int{} // 1: in progress, 2: done
	var visit func(m *module, chain []string) error
	visit = func(m *module, chain []string) error {
		switch state[m] {
		case 1:
			return fmt.Errorf("the modules require each other in a cycle: %s", strings.Join(append(chain, m.Dir), " -> "))
		case 2:
			return nil
		}
		state[m] = 1
		m.level = 0
		for _, d := range m.deps {
			if err := visit(d, append(chain, m.Dir)); err != nil {
				return err
			}
			m.level = max(m.level, d.level+1)
		}
		state[m] = 2
		return nil
	}
	for _, m := range r.Modules {
		if err := visit(m, nil); err != nil {
			return err
		}
	}
	slices.SortStableFunc(r.Modules, func(a, b *module) int {
		if a.level != b.level {
			return a.level - b.level
		}
		return strings.Compare(a.Dir, b.Dir)
	})
	return nil
}
