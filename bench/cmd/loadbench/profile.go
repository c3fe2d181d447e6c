package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/idemkit/idemkit/bench/internal/loadgen"
	"github.com/idemkit/idemkit/bench/internal/servers"
)

// profile measures -profile-workload (First by default) for each of
// -profile-configs twice, with profiles
// written to -profile: in process (CPU, allocations, blocking) and on
// loopback (the server child's CPU and allocations over the measured
// window). The top 10 functions of each go to top.txt there, when the go
// command is at hand.
func (b *bench) profile() error {
	dir, err := filepath.Abs(b.cfg.profileDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var top bytes.Buffer
	for _, spec := range b.cfg.profileConfigs {
		if b.ctx.Err() != nil {
			return b.ctx.Err()
		}
		w := b.cfg.profileWorkload
		base := filepath.Join(dir, strings.ReplaceAll(spec, "/", "-")+"-"+w)
		res, err := b.inprocChild(spec, []string{w}, b.cfg.profileDuration, dir)
		if err != nil {
			b.note("profile %s: %v", spec, err)
		} else {
			r := res[0]
			fmt.Fprintf(&top, "## %s, in-process %s: %.0f ns/op, %.1f allocs/op, %.0f B/op\n\n", spec, w, r.NsPerOp,
				r.AllocsPerOp, r.BytesPerOp)
			b.logf("profile %s in process: %.0f ns/op, %.1f allocs/op, %.0f B/op", spec, r.NsPerOp, r.AllocsPerOp, r.BytesPerOp)
			b.tops(&top, base, true)
		}

		rps, err := b.profileLoopback(spec, base+"-loopback")
		if err != nil {
			b.note("profile %s on loopback: %v", spec, err)
			continue
		}
		fmt.Fprintf(&top, "## %s, loopback %s, %d connections, server process: %.0f req/s\n\n", spec, w,
			b.data.Setup.TargetConns, rps)
		b.logf("profile %s on loopback: %.0f req/s", spec, rps)
		b.tops(&top, base+"-loopback", false)
	}
	path := filepath.Join(dir, "top.txt")
	if err := os.WriteFile(path, top.Bytes(), 0o644); err != nil {
		return err
	}
	b.logf("profiles and their top 10 in %s", dir)
	return nil
}

// profileLoopback runs -profile-workload on loopback against a server child that
// profiles its CPU over the measured window, then writes its allocations.
func (b *bench) profileLoopback(spec, base string) (float64, error) {
	wl, err := loadgen.ParseWorkload(b.cfg.profileWorkload)
	if err != nil {
		return 0, err
	}
	ch, err := b.startServer(spec, 0)
	if err != nil {
		return 0, err
	}
	defer ch.stop()
	var profErr error
	res, err := loadgen.Run(b.ctx, loadgen.Config{
		Addr: ch.addr, Path: servers.Path, KeyHeader: "Idempotency-Key", Body: servers.RequestBody,
		Workload: wl, Conns: b.data.Setup.TargetConns, Warmup: b.cfg.warmup,
		Duration: b.cfg.profileDuration, MaxRequests: b.cfg.maxRequests, Prefix: prefix(),
		OnWindow: func(open bool) {
			var err error
			if open {
				err = ch.call(nil, "cpu-start %s", base+".cpu.pprof")
			} else {
				err = ch.call(nil, "cpu-stop")
			}
			if err != nil && profErr == nil {
				profErr = err
			}
		},
	})
	if err != nil {
		return 0, err
	}
	if profErr != nil {
		return 0, profErr
	}
	return res.RPS, ch.call(nil, "allocs %s", base+".allocs.pprof")
}

// tops appends the top 10 of base's profiles to w.
func (b *bench) tops(w *bytes.Buffer, base string, block bool) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		fmt.Fprintf(w, "(no go command to read the profiles: %v)\n\n", err)
		return
	}
	profiles := []struct{ title, file, index string }{
		{"CPU", base + ".cpu.pprof", ""},
		{"allocated bytes", base + ".allocs.pprof", "alloc_space"},
		{"allocated objects", base + ".allocs.pprof", "alloc_objects"},
	}
	if block {
		profiles = append(profiles, struct{ title, file, index string }{"time blocked", base + ".block.pprof", "delay"})
	}
	for _, p := range profiles {
		args := []string{"tool", "pprof", "-top", "-nodecount=10"}
		if p.index != "" {
			args = append(args, "-sample_index="+p.index)
		}
		out, err := exec.CommandContext(b.ctx, goCmd, append(args, p.file)...).CombinedOutput()
		fmt.Fprintf(w, "%s (%s):\n\n```\n%s```\n\n", p.title, filepath.Base(p.file), trimPprof(out, err))
	}
}

// trimPprof keeps pprof's table and the line saying how much it shows.
func trimPprof(out []byte, err error) string {
	s := string(out)
	if err != nil {
		return s + "\n(" + err.Error() + ")\n"
	}
	if i := strings.Index(s, "Showing nodes"); i >= 0 {
		s = s[i:]
	}
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s
}
