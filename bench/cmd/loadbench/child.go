package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/bench/internal/servers"
	"github.com/idemkit/idemkit/internal/costfloor"
)

// childOptions are what the parent passes a child on its command line.
type childOptions struct {
	spec          string // "framework/kind"
	dir           string
	maxRecords    int
	purgeInterval time.Duration
	pool          int // fleet servers' connection pools
	ablation      costfloor.Ablation
	// inproc mode only
	workloads  string
	duration   time.Duration
	prefix     uint32
	profileDir string
}

func (o childOptions) build(dir string) (*servers.Server, error) {
	fw, kind, _ := strings.Cut(o.spec, "/")
	return servers.Build(servers.Options{Framework: fw, Kind: kind, Dir: dir, MaxRecords: o.maxRecords,
		PurgeInterval: o.purgeInterval, Pool: o.pool, Ablation: o.ablation,
		PostgresDSN: os.Getenv(servers.PostgresEnv), RedisAddr: os.Getenv(servers.RedisEnv)})
}

// reply writes one JSON line to the parent.
func reply(w *bufio.Writer, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]string{"error": err.Error()})
	}
	w.Write(b)
	w.WriteByte('\n')
	w.Flush()
}

type errorReply struct {
	Error string `json:"error"`
}

// serveChild is the server process: it serves o.spec on a loopback port
// and answers the parent's commands, one per line on stdin, with one JSON
// line each on stdout (see proc.go for the parent's side). It exits when
// stdin closes.
func serveChild(o childOptions) error {
	out := bufio.NewWriter(os.Stdout)
	var (
		srv   *servers.Server
		ln    net.Listener
		sdir  string
		gen   int
		fills uint16
	)
	start := func() error {
		gen++
		sdir = filepath.Join(o.dir, strconv.Itoa(gen))
		if err := os.MkdirAll(sdir, 0o755); err != nil {
			return err
		}
		s, err := o.build(sdir)
		if err != nil {
			return err
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			s.Close()
			return err
		}
		srv, ln = s, l
		go s.Serve(l)
		return nil
	}
	stop := func() {
		if srv != nil {
			ln.Close()
			srv.Stop()
			os.RemoveAll(sdir)
			srv = nil
		}
	}
	defer stop()
	if err := start(); err != nil {
		reply(out, errorReply{err.Error()})
		return err
	}
	type addrReply struct {
		Addr string `json:"addr"`
	}
	reply(out, addrReply{ln.Addr().String()})

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		arg := func(i int) int64 {
			if i >= len(f) {
				return 0
			}
			n, _ := strconv.ParseInt(f[i], 10, 64)
			return n
		}
		var err error
		switch f[0] {
		case "reset":
			stop()
			if err = start(); err == nil {
				reply(out, addrReply{ln.Addr().String()})
			}
		case "mem":
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			reply(out, memReply{Mallocs: m.Mallocs, Bytes: m.TotalAlloc, Heap: m.HeapAlloc, GC: m.NumGC, CPU: cpuTime()})
		case "heap":
			runtime.GC()
			runtime.GC() // the second collection frees what the first finalised
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			reply(out, memReply{Mallocs: m.Mallocs, Bytes: m.TotalAlloc, Heap: m.HeapAlloc, GC: m.NumGC})
		case "fill":
			began := time.Now()
			if srv.Mem != nil {
				fills++
				err = servers.FillThrough(srv.Invoker(), fills, int(arg(1)))
			} else {
				_, err = srv.CopyRecords(int(arg(1)), false)
			}
			if err == nil {
				reply(out, tookReply{Took: time.Since(began)})
			}
		case "expire":
			began := time.Now()
			var r servers.RowRange
			if r, err = srv.CopyRecords(int(arg(1)), true); err == nil {
				reply(out, rangeReply{First: r.First, Last: r.Last, Took: time.Since(began)})
			}
		case "left":
			var left bool
			if left, err = srv.AnyLeft(servers.RowRange{First: arg(1), Last: arg(2)}); err == nil {
				reply(out, leftReply{Left: left})
			}
		case "purge-start":
			if err = srv.StartPurger(time.Duration(arg(1))); err == nil {
				reply(out, struct{}{})
			}
		case "cpu-start":
			var fh *os.File
			if fh, err = os.Create(f[1]); err == nil {
				if err = pprof.StartCPUProfile(fh); err == nil {
					reply(out, struct{}{})
				}
			}
		case "cpu-stop":
			pprof.StopCPUProfile()
			reply(out, struct{}{})
		case "allocs":
			if err = writeProfile("allocs", f[1]); err == nil {
				reply(out, struct{}{})
			}
		default:
			err = fmt.Errorf("unknown command %q", f[0])
		}
		if err != nil {
			reply(out, errorReply{err.Error()})
		}
	}
	return in.Err()
}

type memReply struct {
	Mallocs, Bytes, Heap uint64
	GC                   uint32
	// CPU is the CPU time the process has used (user and system; 0 where
	// the platform does not say).
	CPU time.Duration
}

type tookReply struct {
	Took time.Duration
}

type rangeReply struct {
	First, Last int64
	Took        time.Duration
}

type leftReply struct {
	Left bool
}

func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// inprocResult is one in-process measurement as the child reports it.
type inprocResult struct {
	Workload string
	servers.InProc
}

// inprocChild is the in-process measuring process: it builds o.spec and
// measures each of o.workloads for o.duration, printing one JSON line each.
// With o.profileDir it writes a CPU and an allocation profile per workload.
func inprocChild(o childOptions) error {
	out := bufio.NewWriter(os.Stdout)
	s, err := o.build(o.dir)
	if err != nil {
		return err
	}
	defer s.Close()
	inv := s.Invoker()
	fw, kind, _ := strings.Cut(o.spec, "/")
	if o.profileDir != "" {
		// Where the request waits rather than runs (a database lock, a
		// channel): one sample per 10 µs blocked on average.
		runtime.SetBlockProfileRate(10_000)
	}
	for _, w := range strings.Split(o.workloads, ",") {
		var cpu *os.File
		name := filepath.Join(o.profileDir, fw+"-"+kind+"-"+w)
		if o.profileDir != "" {
			if cpu, err = os.Create(name + ".cpu.pprof"); err != nil {
				return err
			}
			if err := pprof.StartCPUProfile(cpu); err != nil {
				return err
			}
		}
		m, err := servers.Measure(inv, w, o.duration, o.prefix)
		if o.profileDir != "" {
			pprof.StopCPUProfile()
			cpu.Close()
			for _, p := range []string{"allocs", "block"} {
				if err := writeProfile(p, name+"."+p+".pprof"); err != nil {
					return err
				}
			}
		}
		if err != nil {
			return err
		}
		reply(out, inprocResult{Workload: w, InProc: m})
	}
	return nil
}
