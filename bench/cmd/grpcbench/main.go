// Command grpcbench measures what the gRPC interceptor (adapters/grpc)
// costs beside the bare unary handler, in process and on loopback, for a
// first call (a new key each time) and a replay, on the memory store, and
// prints each figure with its ratio to the bare handler's.
//
//	go run ./bench/cmd/grpcbench                      # about 20 seconds
//	go run ./bench/cmd/grpcbench -reps 5 -duration 2s -concurrency 64
//
// The service is gRPC's own test service (grpc.testing.TestService, its
// UnaryCall: generated code), with a ~100-byte request and a ~150-byte
// reply, the sizes of the HTTP benchmarks.
//
//   - In process: the interceptor called directly around the handler, as
//     gRPC calls it, in one goroutine: no network, no codec.
//   - Loopback: a real gRPC server in a child process of this command with
//     GOMAXPROCS=1, called over one connection by -concurrency concurrent
//     calls from this process, also GOMAXPROCS=1, as bench/cmd/loadbench
//     runs the HTTP servers.
//
// Each figure is the median over -reps repetitions, each configuration
// measured once per repetition in turn, and each ratio the median of the
// ratios within a repetition, so that a machine busier in one repetition
// than another skews no ratio.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	idemgrpc "github.com/idemkit/idemkit/adapters/grpc"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// serveEnv, set in the environment of a child, makes it a server: "bare"
// or "guarded".
const serveEnv = "GRPCBENCH_SERVE"

const unaryCall = "/grpc.testing.TestService/UnaryCall"

var request = &grpc_testing.SimpleRequest{ResponseSize: 150, Payload: &grpc_testing.Payload{Body: bytes.Repeat([]byte("c"), 100)}}

// service answers UnaryCall with a payload of the size asked for.
type service struct {
	grpc_testing.UnimplementedTestServiceServer
}

var replyBody = bytes.Repeat([]byte("r"), 1<<10)

func (service) UnaryCall(_ context.Context, req *grpc_testing.SimpleRequest) (*grpc_testing.SimpleResponse, error) {
	return &grpc_testing.SimpleResponse{Payload: &grpc_testing.Payload{Body: replyBody[:min(int(req.GetResponseSize()), len(replyBody))]}}, nil
}

// guard returns the interceptor on a fresh memory store, large enough for
// every key of a run.
func guard() grpc.UnaryServerInterceptor {
	store := memstore.New(memstore.WithMaxRecords(1<<30), memstore.WithPurgeInterval(0))
	return idemgrpc.UnaryServerInterceptor(idem.New(idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler)}))
}

// The cases, in the order printed.
var cases = [...]struct {
	name    string
	guarded bool
	replay  bool // one fixed key, recorded before the measure
}{
	{"bare handler", false, false},
	{"first call", true, false},
	{"replay", true, true},
}

func main() {
	if mode := os.Getenv(serveEnv); mode != "" {
		if err := serve(mode == "guarded"); err != nil {
			fmt.Fprintln(os.Stderr, "grpcbench server:", err)
			os.Exit(1)
		}
		return
	}
	reps := flag.Int("reps", 3, "repetitions; each figure is the median over them")
	duration := flag.Duration("duration", time.Second, "how long each configuration is measured, per repetition")
	concurrency := flag.Int("concurrency", 16, "concurrent calls on loopback, over one connection")
	timeout := flag.Duration("timeout", 10*time.Minute, "bound on the whole run")
	flag.Parse()
	runtime.GOMAXPROCS(1)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	var inproc, loop [len(cases)][]figure
	for rep := range *reps {
		fmt.Fprintf(os.Stderr, "repetition %d of %d\n", rep+1, *reps)
		for i, c := range cases {
			inproc[i] = append(inproc[i], inProcess(c.guarded, c.replay, *duration))
		}
		for i, c := range cases {
			f, err := loopback(ctx, c.guarded, c.replay, *duration, *concurrency)
			if err != nil {
				fmt.Fprintln(os.Stderr, "grpcbench:", err)
				os.Exit(1)
			}
			loop[i] = append(loop[i], f)
		}
	}
	fmt.Printf("gRPC unary call (UnaryCall, ~100-byte request, ~150-byte reply), memory store; medians of %d repetitions of %v\n\n", *reps, *duration)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "where\tcase\tcalls/s\tper call\tadded per call\tp50\tp99\tallocs/call\tcost vs bare\t")
	print := func(where string, figs [len(cases)][]figure, latencies bool) {
		for i, c := range cases {
			m := median(figs[i], func(f figure) float64 { return f.perCall.Seconds() })
			ratio := medianRatio(figs[i], figs[0])
			added := "-"
			if i > 0 {
				added = round(time.Duration(medianAdded(figs[i], figs[0]) * 1e9)).String()
			}
			p50, p99 := "-", "-"
			if latencies {
				p50 = round(time.Duration(median(figs[i], func(f figure) float64 { return f.p50.Seconds() }) * 1e9)).String()
				p99 = round(time.Duration(median(figs[i], func(f figure) float64 { return f.p99.Seconds() }) * 1e9)).String()
			}
			allocs := "-"
			if !latencies {
				allocs = strconv.FormatFloat(median(figs[i], func(f figure) float64 { return f.allocs }), 'f', 1, 64)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%v\t%s\t%s\t%s\t%s\t%.2f×\t\n", where, c.name, 1/m,
				round(time.Duration(m*1e9)), added, p50, p99, allocs, ratio)
		}
	}
	print("in process", inproc, false)
	print(fmt.Sprintf("loopback, %d concurrent", *concurrency), loop, true)
	tw.Flush()
}

// figure is one configuration's measure in one repetition.
type figure struct {
	perCall  time.Duration // wall time per call: the inverse of throughput
	p50, p99 time.Duration // latency of one call (loopback only)
	allocs   float64       // heap allocations per call (in process only)
}

var keys atomic.Int64

func newKey() string { return "bench-" + strconv.FormatInt(keys.Add(1), 10) }

const fixedKey = "8e03978e-40d5-43e8-bc93-6894a57f9324"

// inProcess calls the handler, through the interceptor if guarded, for d.
func inProcess(guarded, replay bool, d time.Duration) figure {
	handler := func(ctx context.Context, req any) (any, error) {
		return service{}.UnaryCall(ctx, req.(*grpc_testing.SimpleRequest))
	}
	info := &grpc.UnaryServerInfo{FullMethod: unaryCall}
	var icpt grpc.UnaryServerInterceptor
	if guarded {
		icpt = guard()
	}
	call := func() {
		key := fixedKey
		if !replay {
			key = newKey()
		}
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(idemgrpc.KeyMetadata, key))
		if icpt == nil {
			_, _ = handler(ctx, request)
		} else if _, err := icpt(ctx, request, info, handler); err != nil {
			panic(err) // the memory store never refuses: a broken build
		}
	}
	call() // records the replayed key, and warms up
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	n := 0
	for time.Since(start) < d {
		for range 100 {
			call()
		}
		n += 100
	}
	elapsed := time.Since(start)
	runtime.ReadMemStats(&after)
	return figure{perCall: elapsed / time.Duration(n), allocs: float64(after.Mallocs-before.Mallocs) / float64(n)}
}

// loopback starts a server in a child process and calls it from
// concurrency goroutines over one connection for d.
func loopback(ctx context.Context, guarded, replay bool, d time.Duration, concurrency int) (figure, error) {
	addr, stop, err := startServer(ctx, guarded)
	if err != nil {
		return figure{}, err
	}
	defer stop()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return figure{}, err
	}
	defer conn.Close()
	call := func(opts ...grpc.CallOption) error {
		key := fixedKey
		if !replay {
			key = newKey()
		}
		cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, idemgrpc.KeyMetadata, key), 10*time.Second)
		defer cancel()
		return conn.Invoke(cctx, unaryCall, request, new(grpc_testing.SimpleResponse), opts...)
	}
	if err := call(); err != nil { // records the replayed key, and connects
		return figure{}, err
	}
	// A server that does not do what the case measures is not measured.
	var header metadata.MD
	if err := call(grpc.Header(&header)); err != nil {
		return figure{}, err
	}
	if idemgrpc.Replayed(header) != (guarded && replay) {
		return figure{}, fmt.Errorf("the server's answer (header %v) is not what the case measures (guarded %v, replay %v)", header, guarded, replay)
	}
	run := func(d time.Duration, keep bool) ([]time.Duration, error) {
		var mu sync.Mutex
		var all []time.Duration
		var firstErr error
		var wg sync.WaitGroup
		end := time.Now().Add(d)
		for range concurrency {
			wg.Go(func() {
				var mine []time.Duration
				for time.Now().Before(end) {
					t := time.Now()
					if err := call(); err != nil {
						mu.Lock()
						firstErr = cmpErr(firstErr, err)
						mu.Unlock()
						return
					}
					mine = append(mine, time.Since(t))
				}
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			})
		}
		wg.Wait()
		if !keep {
			all = nil
		}
		return all, firstErr
	}
	if _, err := run(d/5, false); err != nil { // warm-up
		return figure{}, err
	}
	start := time.Now()
	lat, err := run(d, true)
	elapsed := time.Since(start)
	if err != nil {
		return figure{}, err
	}
	if len(lat) == 0 {
		return figure{}, errors.New("no call completed")
	}
	slices.Sort(lat)
	return figure{perCall: elapsed / time.Duration(len(lat)), p50: lat[len(lat)/2], p99: lat[len(lat)*99/100]}, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// startServer starts this program as a server child with GOMAXPROCS=1,
// and returns its address and a function that stops it.
func startServer(ctx context.Context, guarded bool) (string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	mode := "bare"
	if guarded {
		mode = "guarded"
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), serveEnv+"="+mode, "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		_ = stdin.Close() // the child stops when its stdin closes
		_ = cmd.Wait()
	}
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("the server child did not start: %v", err)
	}
	return strings.TrimSpace(addr), stop, nil
}

// serve is the child: it serves the test service on a free loopback port,
// prints the address, and stops when its stdin closes.
func serve(guarded bool) error {
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var opts []grpc.ServerOption
	if guarded {
		opts = append(opts, grpc.UnaryInterceptor(guard()))
	}
	srv := grpc.NewServer(opts...)
	grpc_testing.RegisterTestServiceServer(srv, service{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		srv.Stop()
	}()
	fmt.Println(lis.Addr().String())
	return srv.Serve(lis)
}

// median returns the median of v over figs.
func median(figs []figure, v func(figure) float64) float64 {
	vals := make([]float64, len(figs))
	for i, f := range figs {
		vals[i] = v(f)
	}
	return medianOf(vals)
}

// medianRatio is the median over the repetitions of figs' time per call
// divided by base's in the same repetition.
func medianRatio(figs, base []figure) float64 {
	vals := make([]float64, len(figs))
	for i := range figs {
		vals[i] = figs[i].perCall.Seconds() / base[i].perCall.Seconds()
	}
	return medianOf(vals)
}

// medianAdded is the median over the repetitions of the time per call
// figs add to base's in the same repetition, in seconds.
func medianAdded(figs, base []figure) float64 {
	vals := make([]float64, len(figs))
	for i := range figs {
		vals[i] = figs[i].perCall.Seconds() - base[i].perCall.Seconds()
	}
	return medianOf(vals)
}

func medianOf(vals []float64) float64 {
	slices.Sort(vals)
	n := len(vals)
	if n%2 == 1 {
		return vals[n/2]
	}
	return (vals[n/2-1] + vals[n/2]) / 2
}

// round keeps three significant digits of d.
func round(d time.Duration) time.Duration {
	switch {
	case d >= 100*time.Microsecond:
		return d.Round(time.Microsecond)
	case d >= 10*time.Microsecond:
		return d.Round(100 * time.Nanosecond)
	case d >= time.Microsecond:
		return d.Round(10 * time.Nanosecond)
	}
	return d
}
