package idemgrpc_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"

	idemgrpc "github.com/idemkit/idemkit/adapters/grpc"
	"github.com/idemkit/idemkit/adapters/grpc/internal/grpcsuite"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
)

// The benchmarks compare each idemkit path with the same handler alone, in
// the same run, so the ratio is what counts, not the machine. The service
// is gRPC's own test service (its UnaryCall, generated code), with a
// ~100-byte request and a ~150-byte reply, the sizes of the HTTP adapters'
// benchmarks.
//
//	go test -run XXX -bench . -benchmem ./adapters/grpc/
//
// bench/cmd/grpcbench prints the ratios, in process and on loopback.

const unaryCall = "/grpc.testing.TestService/UnaryCall"

var (
	benchRequest = &grpc_testing.SimpleRequest{ResponseSize: 150,
		Payload: &grpc_testing.Payload{Body: bytes.Repeat([]byte("c"), 100)}}
	benchReply = bytes.Repeat([]byte("r"), 150)
)

// benchService answers UnaryCall with a payload of the size asked.
type benchService struct {
	grpc_testing.UnimplementedTestServiceServer
}

func (benchService) UnaryCall(_ context.Context, req *grpc_testing.SimpleRequest) (*grpc_testing.SimpleResponse, error) {
	return &grpc_testing.SimpleResponse{Payload: &grpc_testing.Payload{Body: benchReply[:req.GetResponseSize()]}}, nil
}

func benchEngine(b *testing.B) *idem.Engine {
	store := memstore.New(memstore.WithMaxRecords(1<<30), memstore.WithPurgeInterval(0))
	b.Cleanup(func() { store.Close() })
	return idem.New(idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
}

var benchKeys atomic.Int64

func uniqueKey() string { return "bench-" + strconv.FormatInt(benchKeys.Add(1), 10) }
func fixedKey() string  { return "8e03978e-40d5-43e8-bc93-6894a57f9324" }

// BenchmarkInterceptor calls the interceptor in process, around the
// service's handler, as gRPC would: no network, no codec. (A replay's
// response header cannot be set without a gRPC stream; that attempt, which
// fails at once, is part of its figure.)
func BenchmarkInterceptor(b *testing.B) {
	handler := func(ctx context.Context, req any) (any, error) {
		return benchService{}.UnaryCall(ctx, req.(*grpc_testing.SimpleRequest))
	}
	info := &grpc.UnaryServerInfo{FullMethod: unaryCall}
	call := func(b *testing.B, icpt grpc.UnaryServerInterceptor, key func() string) {
		b.ReportAllocs()
		for b.Loop() {
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(idemgrpc.KeyMetadata, key()))
			if icpt == nil {
				_, _ = handler(ctx, benchRequest)
			} else if _, err := icpt(ctx, benchRequest, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("HandlerAlone", func(b *testing.B) { call(b, nil, uniqueKey) })
	b.Run("FirstCall", func(b *testing.B) { call(b, idemgrpc.UnaryServerInterceptor(benchEngine(b)), uniqueKey) })
	b.Run("Replay", func(b *testing.B) { call(b, idemgrpc.UnaryServerInterceptor(benchEngine(b)), fixedKey) })
}

// BenchmarkLoopback calls UnaryCall through a real server on loopback,
// bare and behind the interceptor, from parallel clients on one
// connection.
func BenchmarkLoopback(b *testing.B) {
	serve := func(b *testing.B, opts ...grpc.ServerOption) *grpc.ClientConn {
		lis := grpcsuite.Listen(b)
		srv := grpc.NewServer(opts...)
		grpc_testing.RegisterTestServiceServer(srv, benchService{})
		go func() { _ = srv.Serve(lis) }()
		b.Cleanup(srv.Stop)
		return grpcsuite.Dial(b, lis.Addr().String())
	}
	guarded := func(b *testing.B) grpc.ServerOption {
		return grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(benchEngine(b)))
	}
	call := func(b *testing.B, conn *grpc.ClientConn, key func() string) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			reply := new(grpc_testing.SimpleResponse)
			for pb.Next() {
				ctx := metadata.AppendToOutgoingContext(context.Background(), idemgrpc.KeyMetadata, key())
				if err := conn.Invoke(ctx, unaryCall, benchRequest, reply); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.Run("HandlerAlone", func(b *testing.B) { call(b, serve(b), uniqueKey) })
	b.Run("FirstCall", func(b *testing.B) { call(b, serve(b, guarded(b)), uniqueKey) })
	b.Run("Replay", func(b *testing.B) { call(b, serve(b, guarded(b)), fixedKey) })
}
