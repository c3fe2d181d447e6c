package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// profile runs in-process First for each of -profile-configs with CPU and
// allocation profiles written to -profile, and puts the top 10 functions
// of each in top.txt there (when the go command is at hand).
func (b *bench) profile() error {
	dir, err := filepath.Abs(b.cfg.profileDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var top bytes.Buffer
	goCmd, lookErr := exec.LookPath("go")
	for _, spec := range b.cfg.profileConfigs {
		if b.ctx.Err() != nil {
			return b.ctx.Err()
		}
		res, err := b.inprocChild(spec, []string{"First"}, b.cfg.profileDuration, dir)
		if err != nil {
			b.note("profile %s: %v", spec, err)
			continue
		}
		r := res[0]
		fmt.Fprintf(&top, "### %s, in-process First: %.0f ns/op, %.1f allocs/op, %.0f B/op\n\n", spec, r.NsPerOp,
			r.AllocsPerOp, r.BytesPerOp)
		b.logf("profile %s: %.0f ns/op, %.1f allocs/op, %.0f B/op", spec, r.NsPerOp, r.AllocsPerOp, r.BytesPerOp)
		if lookErr != nil {
			continue
		}
		base := filepath.Join(dir, strings.ReplaceAll(spec, "/", "-")+"-First")
		for _, p := range []struct{ title, file, index string }{
			{"CPU", base + ".cpu.pprof", ""},
			{"allocated bytes", base + ".allocs.pprof", "alloc_space"},
			{"allocated objects", base + ".allocs.pprof", "alloc_objects"},
		} {
			args := []string{"tool", "pprof", "-top", "-nodecount=10"}
			if p.index != "" {
				args = append(args, "-sample_index="+p.index)
			}
			out, err := exec.CommandContext(b.ctx, goCmd, append(args, p.file)...).CombinedOutput()
			fmt.Fprintf(&top, "%s (%s):\n\n```\n%s```\n\n", p.title, filepath.Base(p.file), trimPprof(out, err))
		}
	}
	path := filepath.Join(dir, "top.txt")
	if err := os.WriteFile(path, top.Bytes(), 0o644); err != nil {
		return err
	}
	b.logf("profiles and their top 10 in %s", dir)
	return nil
}

// trimPprof drops pprof's header lines up to the table.
func trimPprof(out []byte, err error) string {
	s := string(out)
	if err != nil {
		return s + "\n(" + err.Error() + ")\n"
	}
	if i := strings.Index(s, "      flat"); i >= 0 {
		s = s[i:]
	}
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s
}
