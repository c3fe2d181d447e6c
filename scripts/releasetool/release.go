package main

import (
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"path"
	"strings"
	"text/tabwriter"
)

// step is one module's part of a release.
type step struct {
	m     *module
	tag   string // the tag to create; "" if the module is not released now
	note  string // why not, or what changed
	bumps []bump
}

// bump raises a require of one repository module on another.
type bump struct {
	file, path, from, to string
}

// plan is what a release does, in dependency order.
type plan struct {
	steps    []step
	releases int
	outside  []string // directories with a go.mod that go.work does not use
}

// makePlan decides, for each module in dependency order, whether it is
// released (its next version has no tag yet) and which of its requires on
// other modules of the repository move to their next versions.
func makePlan(r *repo, tags []string) (*plan, error) {
	has := map[string]bool{}
	for _, t := range tags {
		has[t] = true
	}
	p := &plan{}
	var problems []string
	for _, m := range r.Modules {
		s := step{m: m}
		last, lastTag := latestTag(tags, m.TagPrefix())
		switch {
		case m.Next == "-":
			s.note = "never released (" + VersionsFile + " says -)"
		case has[m.Tag(m.Next)]:
			s.note = "unchanged: " + m.Tag(m.Next) + " exists"
		case last != "" && compareSemver(mustSemver(m.Next), mustSemver(last)) <= 0:
			problems = append(problems, fmt.Sprintf("%s: next version %s is not above the last release %s", m.Dir, m.Next, lastTag))
		default:
			s.tag = m.Tag(m.Next)
			if lastTag != "" {
				s.note = "after " + lastTag
			} else {
				s.note = "first release"
			}
		}
		if s.tag != "" {
			for _, req := range m.Requires {
				dep := moduleByPath(r, req.Path)
				if dep.Next == "-" {
					problems = append(problems, fmt.Sprintf("%s requires %s, which is never released", m.Dir, dep.Dir))
					continue
				}
				if !has[dep.Tag(dep.Next)] && !releasedIn(p, dep) {
					problems = append(problems, fmt.Sprintf("%s requires %s %s, which has no tag and is not released now", m.Dir, dep.Path, dep.Next))
					continue
				}
				if req.Version == dep.Next {
					continue
				}
				if from, ok := parseSemver(req.Version); ok && compareSemver(from, mustSemver(dep.Next)) > 0 {
					problems = append(problems, fmt.Sprintf("%s requires %s %s, above its next version %s", m.Dir, dep.Path, req.Version, dep.Next))
					continue
				}
				s.bumps = append(s.bumps, bump{path.Join(m.Dir, "go.mod"), req.Path, req.Version, dep.Next})
			}
			p.releases++
		}
		p.steps = append(p.steps, s)
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("cannot release:\n  %s", strings.Join(problems, "\n  "))
	}
	return p, nil
}

func releasedIn(p *plan, m *module) bool {
	for _, s := range p.steps {
		if s.m == m {
			return s.tag != ""
		}
	}
	return false
}

func moduleByPath(r *repo, p string) *module {
	for _, m := range r.Modules {
		if m.Path == p {
			return m
		}
	}
	return nil
}

func mustSemver(v string) semver {
	sv, ok := parseSemver(v)
	if !ok {
		panic("not a checked version: " + v)
	}
	return sv
}

// print writes the plan: the tags in the order they are created and
// pushed, grouped by level, the require bumps, and the commands that
// publish them.
func (p *plan) print(w io.Writer, dry bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Tags, in dependency order (%d of %d modules released):\n", p.releases, len(p.steps))
	n, level := 0, -1
	for _, s := range p.steps {
		if s.m.level != level {
			level = s.m.level
			if level == 0 {
				fmt.Fprintf(tw, "  level 0: requires no other module of the repository\n")
			} else {
				fmt.Fprintf(tw, "  level %d: requires modules of the levels above\n", level)
			}
		}
		tag := "  -"
		if s.tag != "" {
			n++
			tag = fmt.Sprintf("%2d. %s", n, s.tag)
		}
		var deps []string
		for _, d := range s.m.deps {
			deps = append(deps, displayDir(d.Dir))
		}
		requires := ""
		if len(deps) > 0 {
			requires = "requires " + strings.Join(deps, ", ")
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", tag, s.m.Path, s.note, requires)
	}
	tw.Flush()
	if len(p.outside) > 0 {
		fmt.Fprintf(w, "Not in go.work, never released: %s\n", strings.Join(p.outside, ", "))
	}
	fmt.Fprintln(w, "\nRequire bumps, committed before tagging:")
	bumps := false
	for _, s := range p.steps {
		for _, b := range s.bumps {
			fmt.Fprintf(tw, "  %s\t%s\t%s => %s\n", b.file, b.path, b.from, b.to)
			bumps = true
		}
	}
	tw.Flush()
	if !bumps {
		fmt.Fprintln(w, "  none")
	}
	if p.releases == 0 {
		return
	}
	verb := "Then push, in this order"
	if dry {
		verb = "A real run (without -dry-run) commits the bumps and creates the tags; then push, in this order"
	}
	fmt.Fprintf(w, "\n%s:\n  git push origin HEAD\n", verb)
	for _, s := range p.steps {
		if s.tag != "" {
			fmt.Fprintf(w, "  git push origin %s\n", s.tag)
		}
	}
}

// displayDir names the root module's directory "root".
func displayDir(dir string) string {
	if dir == "." {
		return "root"
	}
	return dir
}

// release prints the plan, and unless dry, carries it out: bump the
// requires, empty the list of accepted API changes (the new tags become
// the base of the next check), commit, and tag in dependency order.
func release(root string, dry bool, out io.Writer) error {
	r, err := loadRepo(root)
	if err != nil {
		return err
	}
	tags, err := gitLines(root, "tag", "--list")
	if err != nil {
		return err
	}
	p, err := makePlan(r, tags)
	if err != nil {
		return err
	}
	if p.outside, err = outsideWork(r); err != nil {
		return err
	}
	if dry {
		fmt.Fprintln(out, "Release plan (dry run: nothing is changed)")
		fmt.Fprintln(out)
		p.print(out, true)
		return nil
	}
	if p.releases == 0 {
		fmt.Fprintln(out, "Nothing to release: every module's next version in "+VersionsFile+" is tagged.")
		return nil
	}
	if dirty, err := gitLines(root, "status", "--porcelain"); err != nil {
		return err
	} else if len(dirty) > 0 {
		return fmt.Errorf("the working tree has changes; release from a clean checkout:\n  %s", strings.Join(dirty, "\n  "))
	}
	var files []string
	for _, s := range p.steps {
		for _, b := range s.bumps {
			if err := run1(root, "go", "mod", "edit", "-require="+b.path+"@"+b.to, b.file); err != nil {
				return err
			}
			files = append(files, b.file)
		}
	}
	if changed, err := clearAccepted(root); err != nil {
		return err
	} else if changed {
		files = append(files, AcceptedFile)
	}
	var names []string
	for _, s := range p.steps {
		if s.tag != "" {
			names = append(names, s.tag)
		}
	}
	if len(files) > 0 {
		if err := run1(root, "git", append([]string{"add", "--"}, files...)...); err != nil {
			return err
		}
		msg := "release: " + strings.Join(names, ", ") + "\n\nRequires between the repository's modules moved to the released versions."
		if err := run1(root, "git", "commit", "-q", "-m", msg); err != nil {
			return err
		}
	}
	for _, s := range p.steps {
		if s.tag == "" {
			continue
		}
		if err := run1(root, "git", "tag", "-a", s.tag, "-m", s.m.Path+" "+s.m.Next); err != nil {
			return err
		}
	}
	p.print(out, false)
	return nil
}

// outsideWork lists the directories of committed go.mod files that
// go.work does not use: such a module is never released.
func outsideWork(r *repo) ([]string, error) {
	files, err := gitLines(r.Root, "ls-files", "--", "go.mod", "**/go.mod")
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, f := range files {
		if dir := path.Dir(f); r.module(dir) == nil {
			dirs = append(dirs, dir)
		}
	}
	return dirs, nil
}

// gitLines runs git in dir and returns its output's non-empty lines.
func gitLines(dir string, args ...string) ([]string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// run1 runs a command in dir, showing its output only if it fails.
func run1(dir, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}
