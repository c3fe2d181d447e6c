package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/bench/internal/report"
	"github.com/idemkit/idemkit/bench/internal/servers"
)

// inprocWorkloads are what each configuration is measured with in process.
func inprocWorkloads(fw, kind string) []string {
	if servers.Fleet(kind) { // measured on loopback only
		return nil
	}
	switch kind {
	case "sqlite", "sqlitetx", "insert":
		if fw == "nethttp" { // the SQLite figures are about the store, not the framework
			return []string{"First"}
		}
		return nil
	case "bare": // a key or none, a first request or a retry: the same to the bare handler
		return []string{"First", "NoKey"}
	default:
		return []string{"First", "Replay", "NoKey"}
	}
}

// inproc measures the handler chains in process, each configuration in a
// child of its own per repetition, configurations alternated.
func (b *bench) inproc() error {
	for rep := range b.cfg.reps {
		for _, fw := range b.cfg.frameworks {
			for _, k := range b.kindsOf(fw, rep) {
				ws := inprocWorkloads(fw, k)
				if len(ws) == 0 || b.ctx.Err() != nil {
					continue
				}
				res, err := b.inprocChild(fw+"/"+k, ws, b.cfg.inprocDuration, "")
				if err != nil {
					b.note("in process, rep %d %s/%s: %v", rep+1, fw, k, err)
					continue
				}
				for _, r := range res {
					b.data.InProc = append(b.data.InProc, report.InProcRun{
						Framework: fw, Kind: k, Workload: r.Workload, Rep: rep,
						NsPerOp: r.NsPerOp, AllocsPerOp: r.AllocsPerOp, BytesPerOp: r.BytesPerOp, Status: r.Status,
					})
					b.logf("in process rep %d %-7s %-7s %-6s %8.0f ns/op %5.1f allocs %6.0f B %v",
						rep+1, fw, k, r.Workload, r.NsPerOp, r.AllocsPerOp, r.BytesPerOp, r.Status)
				}
			}
		}
	}
	return nil
}

// inprocChild runs one in-process child and collects its results.
func (b *bench) inprocChild(spec string, workloads []string, d time.Duration, profileDir string) ([]inprocResult, error) {
	dir, err := b.childDir()
	if err != nil {
		return nil, err
	}
	args := []string{"-child", "inproc", "-child-spec", spec, "-child-dir", dir,
		"-child-max-records", strconv.Itoa(b.cfg.memMaxRecords), "-child-purge-interval", "0s",
		"-child-pool", strconv.Itoa(b.cfg.fleetPool), "-child-ablate", string(b.cfg.ablation),
		"-child-workloads", strings.Join(workloads, ","), "-child-duration", d.String(),
		"-child-prefix", strconv.FormatUint(uint64(prefix()), 10)}
	if profileDir != "" {
		args = append(args, "-child-profile-dir", profileDir)
	}
	ch, err := startChild(b.ctx, spec, args, nil)
	if err != nil {
		return nil, err
	}
	var out []inprocResult
	for range workloads {
		var r inprocResult
		if err := ch.next(&r); err != nil {
			ch.stop()
			return out, err
		}
		if !slices.Contains(workloads, r.Workload) {
			ch.stop()
			return out, fmt.Errorf("unexpected result for %q", r.Workload)
		}
		out = append(out, r)
	}
	return out, ch.stop()
}
