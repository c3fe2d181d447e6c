package idemgrpc_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"sync/atomic"

	idemgrpc "github.com/idemkit/idemkit/adapters/grpc"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// charges is a generated service's implementation: gRPC's own test
// service stands in for yours. Its UnaryCall takes a charge.
type charges struct {
	grpc_testing.UnimplementedTestServiceServer
	taken atomic.Int64
}

func (c *charges) UnaryCall(context.Context, *grpc_testing.SimpleRequest) (*grpc_testing.SimpleResponse, error) {
	id := fmt.Sprintf("ch_%d", c.taken.Add(1))
	return &grpc_testing.SimpleResponse{Payload: &grpc_testing.Payload{Body: []byte(id)}}, nil
}

func Example() {
	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})

	// The server. Generated code registers the service's descriptor, so
	// the interceptor knows the reply type to replay into.
	srv := grpc.NewServer(grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(engine)))
	grpc_testing.RegisterTestServiceServer(srv, &charges{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	// The client, with the interceptor that sends keys and retries.
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{})))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := grpc_testing.NewTestServiceClient(conn)

	// A key of the caller's own: the second call is a retry.
	ctx := metadata.AppendToOutgoingContext(context.Background(), idemgrpc.KeyMetadata, "charge-1")
	charge := &grpc_testing.SimpleRequest{Payload: &grpc_testing.Payload{Body: []byte("1999 usd")}}
	for range 2 {
		var header metadata.MD
		reply, err := client.UnaryCall(ctx, charge, grpc.Header(&header))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s (replayed: %v)\n", reply.GetPayload().GetBody(), idemgrpc.Replayed(header))
	}
	// The same key with another charge is refused.
	other := &grpc_testing.SimpleRequest{Payload: &grpc_testing.Payload{Body: []byte("2000 usd")}}
	_, err = client.UnaryCall(ctx, other)
	fmt.Println(status.Code(err))
	// Output:
	// ch_1 (replayed: false)
	// ch_1 (replayed: true)
	// FailedPrecondition
}

// A caller that retries an operation itself, after a call that ended in
// DEADLINE_EXCEEDED, say (which the interceptor does not retry: the charge
// may have been taken), sends the key the interceptor used the first time,
// so that the retry gets that charge instead of taking another.
func ExampleKeyUsed() {
	client, stop := chargesClient()
	defer stop()
	ctx := context.Background()
	charge := &grpc_testing.SimpleRequest{Payload: &grpc_testing.Payload{Body: []byte("1999 usd")}}

	var key string // the key the call is sent with, made by the interceptor
	_, err := client.UnaryCall(ctx, charge, idemgrpc.KeyUsed(&key))
	fmt.Println("first call:", status.Code(err))

	// Whatever became of the call (DEADLINE_EXCEEDED, say: the charge may
	// have been taken), the operation is tried again with the same key.
	var header metadata.MD
	reply, err := client.UnaryCall(idemgrpc.WithOutgoingKey(ctx, key), charge, grpc.Header(&header))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (replayed: %v)\n", reply.GetPayload().GetBody(), idemgrpc.Replayed(header))
	// Output:
	// first call: OK
	// ch_1 (replayed: true)
}

// chargesClient serves charges behind the server interceptor on loopback
// and returns a client of it with the client interceptor, and a function
// that stops both.
func chargesClient() (grpc_testing.TestServiceClient, func()) {
	store := memstore.New()
	srv := grpc.NewServer(grpc.UnaryInterceptor(idemgrpc.UnaryServerInterceptor(idem.New(idem.Config{Store: store}))))
	grpc_testing.RegisterTestServiceServer(srv, &charges{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{})))
	if err != nil {
		log.Fatal(err)
	}
	return grpc_testing.NewTestServiceClient(conn), func() {
		conn.Close()
		srv.Stop()
		store.Close()
	}
}
