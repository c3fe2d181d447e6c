package grpcsuite

import (
	"context"
	"net"
	"testing"

	idemgrpc "github.com/idemkit/idemkit/adapters/grpc"
	idem "github.com/idemkit/idemkit/core"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TenantMetadata is the metadata entry the suite's server takes each
// call's tenant from (a real server takes it from authentication).
const TenantMetadata = "x-tenant"

// TenantScope is the scope function of the suite's server: the
// TenantMetadata entry.
func TenantScope(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, TenantMetadata); len(v) == 1 {
		return v[0]
	}
	return ""
}

// Recover is a unary server interceptor that answers a panic with
// INTERNAL, as the recovery interceptors chained before idemkit's do.
func Recover(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (reply any, err error) {
	defer func() {
		if p := recover(); p != nil {
			reply, err = nil, status.Errorf(codes.Internal, "panic: %v", p)
		}
	}()
	return handler(ctx, req)
}

// Listen returns a listener on a free loopback port, closed when tb ends.
func Listen(tb testing.TB) net.Listener {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = lis.Close() })
	return lis
}

// NewServer returns a gRPC server serving a's services behind Recover and
// the interceptor for e, which takes the tenant from TenantMetadata unless
// opts say otherwise.
func NewServer(e *idem.Engine, a *App, opts ...idemgrpc.Option) *grpc.Server {
	opts = append([]idemgrpc.Option{idemgrpc.WithScope(TenantScope)}, opts...)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(Recover, idemgrpc.UnaryServerInterceptor(e, opts...)))
	Register(srv, a)
	healthpb.RegisterHealthServer(srv, health.NewServer()) // gRPC's own health service, as probes call it
	return srv
}

// Serve serves a's services behind the interceptor for e (see NewServer)
// on a real loopback listener and returns its address. When tb ends the
// calls held in Slow are released and the server stops.
func Serve(tb testing.TB, e *idem.Engine, a *App, opts ...idemgrpc.Option) string {
	tb.Helper()
	lis := Listen(tb)
	srv := NewServer(e, a, opts...)
	go func() { _ = srv.Serve(lis) }()
	tb.Cleanup(srv.Stop)
	tb.Cleanup(a.ReleaseSlow) // first: Stop waits for the handlers to return
	return lis.Addr().String()
}

// Dial returns a client of the server at addr, closed when tb ends.
func Dial(tb testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	tb.Helper()
	opts = append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return conn
}
