package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeRepo writes a repository of modules into a new directory: files
// maps a slash path to its content. It returns the directory.
func writeRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// git runs git in dir with a fixed identity.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := writeRepo(t, files)
	git(t, dir, "init", "-q", "-b", "main")
	git(t, dir, "add", ".")
	git(t, dir, "commit", "-q", "-m", "start")
	return dir
}

// sample is a repository shaped like this one: a root module, two that
// require it, and one that requires those.
func sample() map[string]string {
	return map[string]string{
		"go.work": "go 1.26.0\n\nuse (\n\t.\n\t./b\n\t./a\n\t./app\n)\n",
		"go.mod":  "module example.com/kit\n\ngo 1.26.0\n",
		"a/go.mod": "module example.com/kit/a\n\ngo 1.26.0\n\nrequire example.com/kit v0.0.0\n\n" +
			"replace example.com/kit => ../\n", // not clean, but the same directory
		"b/go.mod": "module example.com/kit/b\n\ngo 1.26.0\n\nrequire example.com/kit v0.0.0\n\n" +
			"replace example.com/kit => ..\n",
		"app/go.mod": "module example.com/kit/app\n\ngo 1.26.0\n\nrequire (\n\texample.com/kit v0.0.0\n" +
			"\texample.com/kit/a v0.0.0\n\texample.com/kit/b v0.0.0\n)\n\n" +
			"replace (\n\texample.com/kit => ..\n\texample.com/kit/a => ../a\n\texample.com/kit/b => ../b\n)\n",
		"versions.txt": "# dir version\n.  v0.1.0\na v0.1.0\nb v0.2.0 # b is ahead\napp v0.1.0\n",
	}
}

func dirs(r *repo) []string {
	var d []string
	for _, m := range r.Modules {
		d = append(d, m.Dir)
	}
	return d
}

func TestLoadRepoOrdersByDependency(t *testing.T) {
	r, err := loadRepo(writeRepo(t, sample()))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dirs(r), []string{".", "a", "b", "app"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	if m := r.module("b"); m.Next != "v0.2.0" || m.Tag(m.Next) != "b/v0.2.0" || r.module(".").Tag("v0.1.0") != "v0.1.0" {
		t.Errorf("b's next version %s, tags %s and %s", m.Next, m.Tag(m.Next), r.module(".").Tag("v0.1.0"))
	}
}

func TestLoadRepoRefusesDisagreement(t *testing.T) {
	for name, c := range map[string]struct {
		edit map[string]string
		want string
	}{
		"module missing from versions": {map[string]string{"versions.txt": ". v0.1.0\na v0.1.0\nb v0.1.0\n"}, "no version for app"},
		"unknown directory":            {map[string]string{"versions.txt": ". v0.1.0\na v0.1.0\nb v0.1.0\napp v0.1.0\nc v0.1.0\n"}, "c is not a module of go.work"},
		"listed twice":                 {map[string]string{"versions.txt": ". v0.1.0\na v0.1.0\nb v0.1.0\napp v0.1.0\na v0.2.0\n"}, "a is listed twice"},
		"not a version":                {map[string]string{"versions.txt": ". v0.1\na v0.1.0\nb v0.1.0\napp v0.1.0\n"}, `"v0.1" is not a semantic version`},
		"v2 without /v2":               {map[string]string{"versions.txt": ". v0.1.0\na v2.0.0\nb v0.1.0\napp v0.1.0\n"}, "needs the module path to end in /v2"},
		"no replace": {map[string]string{"a/go.mod": "module example.com/kit/a\n\ngo 1.26.0\n\nrequire example.com/kit v0.0.0\n"},
			"a/go.mod requires example.com/kit but does not replace it with .."},
		"replace elsewhere": {map[string]string{"a/go.mod": "module example.com/kit/a\n\ngo 1.26.0\n\nrequire example.com/kit v0.0.0\n\nreplace example.com/kit => ../b\n"},
			"want the directory .."},
		"path not the directory": {map[string]string{"a/go.mod": "module example.com/other\n\ngo 1.26.0\n"},
			"must be named example.com/kit/a"},
		"cycle": {map[string]string{"go.mod": "module example.com/kit\n\ngo 1.26.0\n\nrequire example.com/kit/a v0.0.0\n\nreplace example.com/kit/a => ./a\n"},
			"cycle"},
	} {
		t.Run(name, func(t *testing.T) {
			files := sample()
			for k, v := range c.edit {
				files[k] = v
			}
			_, err := loadRepo(writeRepo(t, files))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

func TestPlan(t *testing.T) {
	r, err := loadRepo(writeRepo(t, sample()))
	if err != nil {
		t.Fatal(err)
	}
	// a was released at v0.1.0 already; b at v0.1.0 and moves to v0.2.0.
	p, err := makePlan(r, []string{"a/v0.1.0", "b/v0.1.0", "unrelated", "b/v0.1.0-rc.1"})
	if err != nil {
		t.Fatal(err)
	}
	var tags, notes []string
	var bumps []string
	for _, s := range p.steps {
		tags = append(tags, s.tag)
		notes = append(notes, s.note)
		for _, b := range s.bumps {
			bumps = append(bumps, b.file+" "+b.path+" "+b.from+" "+b.to)
		}
	}
	if want := []string{"v0.1.0", "", "b/v0.2.0", "app/v0.1.0"}; !slices.Equal(tags, want) {
		t.Errorf("tags %q, want %q", tags, want)
	}
	if want := []string{"first release", "unchanged: a/v0.1.0 exists", "after b/v0.1.0", "first release"}; !slices.Equal(notes, want) {
		t.Errorf("notes %q, want %q", notes, want)
	}
	want := []string{
		"b/go.mod example.com/kit v0.0.0 v0.1.0",
		"app/go.mod example.com/kit v0.0.0 v0.1.0",
		"app/go.mod example.com/kit/a v0.0.0 v0.1.0",
		"app/go.mod example.com/kit/b v0.0.0 v0.2.0",
	}
	if !slices.Equal(bumps, want) {
		t.Errorf("bumps\n%s\nwant\n%s", strings.Join(bumps, "\n"), strings.Join(want, "\n"))
	}
}

func TestPlanRefusesAVersionNotAboveTheLast(t *testing.T) {
	r, err := loadRepo(writeRepo(t, sample()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = makePlan(r, []string{"b/v0.3.0"})
	if err == nil || !strings.Contains(err.Error(), "b: next version v0.2.0 is not above the last release b/v0.3.0") {
		t.Fatalf("error %v", err)
	}
}

func TestPlanRefusesARequireOnANeverReleasedModule(t *testing.T) {
	files := sample()
	files["versions.txt"] = ". v0.1.0\na -\nb v0.1.0\napp v0.1.0\n"
	r, err := loadRepo(writeRepo(t, files))
	if err != nil {
		t.Fatal(err)
	}
	if _, err = makePlan(r, nil); err == nil || !strings.Contains(err.Error(), "app requires a, which is never released") {
		t.Fatalf("error %v", err)
	}
}

// TestReleaseDryRunChangesNothing also shows what the dry run prints.
func TestReleaseDryRunChangesNothing(t *testing.T) {
	dir := gitRepo(t, sample())
	var out strings.Builder
	if err := run([]string{"plan", "-C", dir, "-dry-run"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{" 1. v0.1.0 ", " 2. a/v0.1.0 ", " 3. b/v0.2.0 ", " 4. app/v0.1.0 ",
		"app/go.mod  example.com/kit/b  v0.0.0 => v0.2.0", "git push origin b/v0.2.0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the plan does not say %q:\n%s", want, out.String())
		}
	}
	if tags := git(t, dir, "tag", "--list"); tags != "" {
		t.Errorf("a dry run created tags: %s", tags)
	}
	if st := git(t, dir, "status", "--porcelain"); st != "" {
		t.Errorf("a dry run changed files: %s", st)
	}
}

func TestRelease(t *testing.T) {
	files := sample()
	files["api/incompatible.txt"] = "# accepted\nexample.com/kit/a.F: removed\n"
	dir := gitRepo(t, files)
	var out strings.Builder
	if err := run([]string{"plan", "-C", dir}, &out); err != nil {
		t.Fatal(err)
	}
	tags := strings.Fields(git(t, dir, "tag", "--list"))
	slices.Sort(tags)
	if want := []string{"a/v0.1.0", "app/v0.1.0", "b/v0.2.0", "v0.1.0"}; !slices.Equal(tags, want) {
		t.Fatalf("tags %v, want %v", tags, want)
	}
	// Every tag is on the commit that bumped the requires.
	head := git(t, dir, "rev-parse", "HEAD")
	for _, tag := range tags {
		if got := git(t, dir, "rev-parse", tag+"^{commit}"); got != head {
			t.Errorf("%s is on %s, not on the release commit %s", tag, got, head)
		}
	}
	mod, err := os.ReadFile(filepath.Join(dir, "app", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"example.com/kit v0.1.0", "example.com/kit/a v0.1.0", "example.com/kit/b v0.2.0", "example.com/kit/b => ../b"} {
		if !strings.Contains(string(mod), want) {
			t.Errorf("app/go.mod lacks %q:\n%s", want, mod)
		}
	}
	if acc, _ := readList(filepath.Join(dir, "api", "incompatible.txt")); len(acc) != 0 {
		t.Errorf("the accepted changes were not cleared: %v", acc)
	}
	if st := git(t, dir, "status", "--porcelain"); st != "" {
		t.Errorf("files left uncommitted: %s", st)
	}
	// A second run has nothing left to do.
	out.Reset()
	if err := run([]string{"plan", "-C", dir}, &out); err != nil || !strings.Contains(out.String(), "Nothing to release") {
		t.Errorf("second run: %v\n%s", err, out.String())
	}
}

func TestReleaseRefusesADirtyTree(t *testing.T) {
	dir := gitRepo(t, sample())
	if err := os.WriteFile(filepath.Join(dir, "a", "new.go"), []byte("package a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run([]string{"plan", "-C", dir}, new(strings.Builder))
	if err == nil || !strings.Contains(err.Error(), "working tree has changes") {
		t.Fatalf("error %v", err)
	}
	if tags := git(t, dir, "tag", "--list"); tags != "" {
		t.Errorf("tags created: %s", tags)
	}
}

func TestSemver(t *testing.T) {
	order := []string{"v0.0.1", "v0.1.0-alpha", "v0.1.0-alpha.1", "v0.1.0-alpha.beta", "v0.1.0-beta.2", "v0.1.0-beta.11", "v0.1.0", "v0.1.1", "v0.10.0", "v1.0.0"}
	for i := range order {
		for j := range order {
			a, ok1 := parseSemver(order[i])
			b, ok2 := parseSemver(order[j])
			if !ok1 || !ok2 {
				t.Fatalf("%s or %s does not parse", order[i], order[j])
			}
			if got, want := compareSemver(a, b), cmpInt(i, j); got != want {
				t.Errorf("compare(%s, %s) = %d, want %d", order[i], order[j], got, want)
			}
		}
	}
	for _, bad := range []string{"0.1.0", "v0.1", "v01.0.0", "v0.1.0-", "v0.1.x", "v-1.0.0", ""} {
		if _, ok := parseSemver(bad); ok {
			t.Errorf("%q parses", bad)
		}
	}
	if v, tag := latestTag([]string{"v0.2.0", "a/v0.9.0", "a/v0.10.0", "a/b/v1.0.0", "a/v1.0.0-rc.1", "a/junk"}, "a/"); v != "v1.0.0-rc.1" || tag != "a/v1.0.0-rc.1" {
		t.Errorf("latest a/ tag %s %s", v, tag)
	}
	if v, _ := latestTag([]string{"v0.2.0", "a/v0.9.0", "v0.10.0"}, ""); v != "v0.10.0" {
		t.Errorf("latest root tag %s", v)
	}
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestParseAPIDiff(t *testing.T) {
	report := "Incompatible changes:\n- ./core.Storable: removed\n- Middleware: changed from func() to func(int)\n" +
		"Compatible changes:\n- ./core/memstore.WithClock: added\n- package example.com/kit/sim: added\n"
	d, err := parseAPIDiff("example.com/kit", report)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"example.com/kit/core.Storable: removed", "example.com/kit.Middleware: changed from func() to func(int)"}; !slices.Equal(d.incompatible, want) {
		t.Errorf("incompatible %q", d.incompatible)
	}
	if want := []string{"example.com/kit/core/memstore.WithClock: added", "package example.com/kit/sim: added"}; !slices.Equal(d.compatible, want) {
		t.Errorf("compatible %q", d.compatible)
	}
	if _, err := parseAPIDiff("m", "something new\n"); err == nil {
		t.Error("an unknown line is not an error")
	}
	if d, err := parseAPIDiff("m", ""); err != nil || len(d.incompatible)+len(d.compatible) != 0 {
		t.Errorf("no change: %v %v", d, err)
	}
}

func TestJudge(t *testing.T) {
	removed := "example.com/kit/a.F: removed"
	added := "example.com/kit/a.G: added"
	for name, c := range map[string]struct {
		lastTag, next string
		diff          apiDiff
		accepted      bool
		want          string // "" for no problem
	}{
		"baseline, unlisted break":   {"", "v0.1.0", apiDiff{incompatible: []string{removed}}, false, "not listed"},
		"baseline, listed break":     {"", "v0.1.0", apiDiff{incompatible: []string{removed}}, true, ""},
		"baseline, addition":         {"", "v0.1.0", apiDiff{compatible: []string{added}}, false, ""},
		"v0, listed, minor bump":     {"a/v0.1.3", "v0.2.0", apiDiff{incompatible: []string{removed}}, true, ""},
		"v0, listed, patch bump":     {"a/v0.1.3", "v0.1.4", apiDiff{incompatible: []string{removed}}, true, "need at least v0.2.0"},
		"v1, listed break":           {"a/v1.2.0", "v1.3.0", apiDiff{incompatible: []string{removed}}, true, "/v2"},
		"addition, patch bump":       {"a/v1.2.0", "v1.2.1", apiDiff{compatible: []string{added}}, false, "needs at least v1.3.0"},
		"addition, minor bump":       {"a/v1.2.0", "v1.3.0", apiDiff{compatible: []string{added}}, false, ""},
		"no change, patch bump":      {"a/v1.2.0", "v1.2.1", apiDiff{}, false, ""},
		"never released, unlisted":   {"a/v0.1.0", "-", apiDiff{incompatible: []string{removed}}, false, "not listed"},
		"never released, additions":  {"a/v0.1.0", "-", apiDiff{compatible: []string{added}}, false, ""},
		"v0, unlisted, minor bump":   {"a/v0.1.0", "v0.2.0", apiDiff{incompatible: []string{removed}}, false, "not listed"},
		"v0, addition, minor bump":   {"a/v0.1.0", "v0.2.0", apiDiff{compatible: []string{added}}, false, ""},
		"v0, addition, patch bump":   {"a/v0.1.0", "v0.1.1", apiDiff{compatible: []string{added}}, false, "needs at least v0.2.0"},
		"v0 to v1, listed break":     {"a/v0.9.0", "v1.0.0", apiDiff{incompatible: []string{removed}}, true, ""},
		"v0 to v1, unlisted break":   {"a/v0.9.0", "v1.0.0", apiDiff{incompatible: []string{removed}}, false, "not listed"},
		"v0 to v1, addition, bumped": {"a/v0.9.0", "v1.0.0", apiDiff{compatible: []string{added}}, false, ""},
	} {
		t.Run(name, func(t *testing.T) {
			m := &module{Dir: "a", Path: "example.com/kit/a", Next: c.next}
			mc := &moduleCheck{m: m, lastTag: c.lastTag, diff: c.diff}
			if c.lastTag != "" {
				mc.last = strings.TrimPrefix(c.lastTag, "a/")
			}
			mc.judge(map[string]bool{removed: c.accepted})
			got := strings.Join(mc.problems, "; ")
			if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
				t.Errorf("problems %q, want %q", got, c.want)
			}
		})
	}
}

func TestClearAccepted(t *testing.T) {
	dir := writeRepo(t, map[string]string{AcceptedFile: "# why\n\nexample.com/kit.F: removed\n# more\n"})
	changed, err := clearAccepted(dir)
	if err != nil || !changed {
		t.Fatalf("changed %v, %v", changed, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, AcceptedFile))
	if string(b) != "# why\n\n# more\n" {
		t.Errorf("left %q", b)
	}
	if changed, err := clearAccepted(dir); err != nil || changed {
		t.Errorf("second clear: changed %v, %v", changed, err)
	}
}
