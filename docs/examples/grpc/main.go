// Command grpc is the tutorial's endpoint over gRPC: a server whose calls
// are guarded by idemkit's interceptor, and a client whose interceptor
// sends the key and retries with it, in one program.
package main

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
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

func main() {
	store := memstore.New()
	defer store.Close()
	engine := idem.New(idem.Config{Store: store})

	// The server: put recovery and authentication first, then idemkit.
	replies := idemgrpc.WithReplyTypes(map[string]proto.Message{createOrder: &structpb.Struct{}})
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		idemgrpc.UnaryServerInterceptor(engine, replies),
	))
	srv.RegisterService(&ordersService, nil)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	// The client: its interceptor gives each call a key unless it has one,
	// and retries with it.
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{})))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	book := map[string]any{"item": "book", "quantity": 1}
	withKey := metadata.AppendToOutgoingContext(context.Background(), idemgrpc.KeyMetadata, "order-1")
	order(withKey, conn, book)
	order(withKey, conn, book) // a retry: the first reply, replayed
	order(withKey, conn, map[string]any{"item": "book", "quantity": 2})
	order(context.Background(), conn, book) // a key of its own, from the client interceptor
}

// order creates an order and prints what came back.
func order(ctx context.Context, conn *grpc.ClientConn, fields map[string]any) {
	req, err := structpb.NewStruct(fields)
	if err != nil {
		log.Fatal(err)
	}
	var reply structpb.Struct
	var header metadata.MD
	if err := conn.Invoke(ctx, createOrder, req, &reply, grpc.Header(&header)); err != nil {
		st := status.Convert(err)
		fmt.Printf("%v: %s\n", st.Code(), st.Message())
		return
	}
	fmt.Printf("order %v for %v (replayed: %v)\n", reply.Fields["id"].GetNumberValue(),
		reply.Fields["item"].GetStringValue(), idemgrpc.Replayed(header))
}

var orders atomic.Int64

// create is the handler: it runs once per key.
func create(_ context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	return structpb.NewStruct(map[string]any{"id": orders.Add(1), "item": req.Fields["item"].GetStringValue()})
}

// The service shop.Orders, as protoc-gen-go-grpc would write it for
//
//	service Orders { rpc Create(google.protobuf.Struct) returns (google.protobuf.Struct); }
//
// Generated code also registers the service's descriptor, from which the
// interceptor learns each method's reply type; this one is declared by
// hand, so WithReplyTypes gives it.
const createOrder = "/shop.Orders/Create"

var ordersService = grpc.ServiceDesc{
	ServiceName: "shop.Orders",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Create",
		Handler: func(_ any, ctx context.Context, dec func(any) error, intercept grpc.UnaryServerInterceptor) (any, error) {
			req := new(structpb.Struct)
			if err := dec(req); err != nil {
				return nil, err
			}
			handler := func(ctx context.Context, req any) (any, error) { return create(ctx, req.(*structpb.Struct)) }
			if intercept == nil {
				return handler(ctx, req)
			}
			return intercept(ctx, req, &grpc.UnaryServerInfo{FullMethod: createOrder}, handler)
		},
	}},
}
