// Package grpcsuite is the conformance suite of the gRPC interceptor: the
// policy's cases run against a real gRPC server on loopback, for any
// store. Run runs it; the adapter's tests run it on the memory store, and
// the storetests module on the GORM and Redis stores.
//
// Its test service is declared by hand, over well-known types, so that no
// protoc is needed: a ServiceDesc as protoc-gen-go-grpc writes one, and a
// file descriptor built at run time and registered as generated code
// registers its own, so the interceptor finds the methods' reply types and
// options as it does for a generated service.
package grpcsuite

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	idem "github.com/idemkit/idemkit/core"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The methods of the test service, idemkit.grpcsuite.Charges. Every one
// takes a google.protobuf.Struct.
const (
	// Create answers a Struct {"id": "ch_N", "call": N, "amount": ...}, N
	// counting the calls the service ran.
	Create = "/idemkit.grpcsuite.Charges/Create"
	// Fail answers the status its request names ({"code": 5, "message":
	// "..."}), with an ErrorInfo detail, or, for code 0, a StringValue
	// ("ok N"): another reply type than Create's.
	Fail = "/idemkit.grpcsuite.Charges/Fail"
	// Panic panics.
	Panic = "/idemkit.grpcsuite.Charges/Panic"
	// Slow waits until ReleaseSlow is called, whatever its context, as a
	// stalled or cut-off instance would, then answers as Create does.
	Slow = "/idemkit.grpcsuite.Charges/Slow"
	// Held answers a Struct with what idem.HeldKey finds in its context.
	Held = "/idemkit.grpcsuite.Charges/Held"
	// Wait waits for its context to end and answers UNAVAILABLE with the
	// context's cause.
	Wait = "/idemkit.grpcsuite.Charges/Wait"
	// Get answers as Create does; its proto declares idempotency_level
	// NO_SIDE_EFFECTS, so it is not guarded.
	Get = "/idemkit.grpcsuite.Charges/Get"
	// Watch is server-streaming: it sends two Structs.
	Watch = "/idemkit.grpcsuite.Charges/Watch"
	// Empty answers no reply and no error (nil, nil), which gRPC sends as
	// an empty Struct.
	Empty = "/idemkit.grpcsuite.Charges/Empty"
	// Pack takes a google.protobuf.Any and answers as Create does, with
	// the Any's type URL as "type".
	Pack = "/idemkit.grpcsuite.Charges/Pack"
	// Post, the one method of idemkit.grpcsuite.Ledger, answers as Create
	// does. Its service has no registered descriptor: its reply type is
	// known only from idemgrpc.WithReplyTypes.
	Post = "/idemkit.grpcsuite.Ledger/Post"
)

// App is the test service's state: how many calls its handlers ran, and
// the gate that holds Slow.
type App struct {
	calls   atomic.Int64
	entered chan struct{} // one value per call that entered Slow, Wait or Held
	release chan struct{}
	once    sync.Once
}

// NewApp returns an App with Slow held.
func NewApp() *App {
	return &App{entered: make(chan struct{}, 64), release: make(chan struct{})}
}

// Calls returns how many calls the handlers ran.
func (a *App) Calls() int64 { return a.calls.Load() }

// Entered returns a channel receiving a value for each call that entered
// Slow, Wait or Held.
func (a *App) Entered() <-chan struct{} { return a.entered }

// ReleaseSlow lets every call in Slow, and every later one, go on.
func (a *App) ReleaseSlow() { a.once.Do(func() { close(a.release) }) }

func (a *App) enter() { a.entered <- struct{}{} }

func (a *App) charge(req *structpb.Struct) *structpb.Struct {
	n := a.calls.Add(1)
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"id":     structpb.NewStringValue(fmt.Sprintf("ch_%d", n)),
		"call":   structpb.NewNumberValue(float64(n)),
		"amount": req.GetFields()["amount"],
	}}
}

func (a *App) fail(req *structpb.Struct) (*wrapperspb.StringValue, error) {
	n := a.calls.Add(1)
	f := req.GetFields()
	code := codes.Code(f["code"].GetNumberValue())
	if f["ok_error"].GetBoolValue() {
		return nil, okError{}
	}
	if code == codes.OK {
		return wrapperspb.String(fmt.Sprintf("ok %d", n)), nil
	}
	msg := fmt.Sprintf("%s (call %d)", f["message"].GetStringValue(), n)
	if f["invalid_utf8"].GetBoolValue() {
		msg += " \xff\xfe"
	}
	st, err := status.New(code, msg).
		WithDetails(&errdetails.ErrorInfo{Reason: "TEST", Domain: "grpcsuite", Metadata: map[string]string{"call": fmt.Sprint(n)}})
	if err != nil {
		return nil, err
	}
	return nil, st.Err()
}

func (a *App) held(ctx context.Context) *structpb.Struct {
	a.calls.Add(1)
	h, ok := idem.HeldKey(ctx)
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"held":  structpb.NewBoolValue(ok),
		"scope": structpb.NewStringValue(h.ID.Scope),
		"key":   structpb.NewStringValue(h.ID.Key),
		"token": structpb.NewStringValue(h.Token),
	}}
}

// okError is an error whose status has code OK, which gRPC cannot send.
type okError struct{}

func (okError) Error() string              { return "grpcsuite: an error with code OK" }
func (okError) GRPCStatus() *status.Status { return status.New(codes.OK, "an error with code OK") }

func (a *App) wait(ctx context.Context, req *structpb.Struct) error {
	a.calls.Add(1)
	a.enter()
	<-ctx.Done()
	if req.GetFields()["return"].GetStringValue() == "ctx" {
		return ctx.Err() // as most handlers do
	}
	return status.Error(codes.Unavailable, context.Cause(ctx).Error())
}

// Method serves one unary method of a service declared with ServiceDesc.
type Method func(ctx context.Context, req *structpb.Struct) (any, error)

// ServiceDesc declares a service of unary methods taking a Struct, each
// served by its Method, as protoc-gen-go-grpc declares a service, and its
// streams. Register it with a nil implementation: the Methods are closures.
func ServiceDesc(service string, methods map[string]Method, streams ...grpc.StreamDesc) *grpc.ServiceDesc {
	desc := &grpc.ServiceDesc{ServiceName: service, HandlerType: (*any)(nil), Streams: streams}
	for name, call := range methods {
		desc.Methods = append(desc.Methods, grpc.MethodDesc{
			MethodName: name,
			Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				req := new(structpb.Struct)
				if err := dec(req); err != nil {
					return nil, err
				}
				if interceptor == nil {
					return call(ctx, req)
				}
				info := &grpc.UnaryServerInfo{FullMethod: "/" + service + "/" + name}
				return interceptor(ctx, req, info, func(ctx context.Context, req any) (any, error) {
					return call(ctx, req.(*structpb.Struct))
				})
			},
		})
	}
	return desc
}

const (
	chargesService = "idemkit.grpcsuite.Charges"
	ledgerService  = "idemkit.grpcsuite.Ledger"
)

func (a *App) chargesDesc() *grpc.ServiceDesc {
	charge := func(_ context.Context, req *structpb.Struct) (any, error) { return a.charge(req), nil }
	desc := ServiceDesc(chargesService, map[string]Method{
		"Create": charge,
		"Fail":   func(_ context.Context, req *structpb.Struct) (any, error) { return a.fail(req) },
		"Panic": func(context.Context, *structpb.Struct) (any, error) {
			a.calls.Add(1)
			panic("grpcsuite: the handler panics")
		},
		"Slow": func(_ context.Context, req *structpb.Struct) (any, error) {
			a.enter()
			<-a.release
			return a.charge(req), nil
		},
		"Held": func(ctx context.Context, _ *structpb.Struct) (any, error) { return a.held(ctx), nil },
		"Wait": func(ctx context.Context, req *structpb.Struct) (any, error) { return nil, a.wait(ctx, req) },
		"Get":  charge,
		"Empty": func(context.Context, *structpb.Struct) (any, error) {
			a.calls.Add(1)
			return nil, nil
		},
	}, watchDesc)
	desc.Methods = append(desc.Methods, grpc.MethodDesc{MethodName: "Pack", Handler: a.pack})
	return desc
}

// pack serves Pack: its request is a google.protobuf.Any.
func (a *App) pack(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	req := new(anypb.Any)
	if err := dec(req); err != nil {
		return nil, err
	}
	call := func(_ context.Context, req any) (any, error) {
		reply := a.charge(&structpb.Struct{Fields: map[string]*structpb.Value{"amount": structpb.NewNumberValue(0)}})
		reply.Fields["type"] = structpb.NewStringValue(req.(*anypb.Any).GetTypeUrl())
		return reply, nil
	}
	if interceptor == nil {
		return call(ctx, req)
	}
	return interceptor(ctx, req, &grpc.UnaryServerInfo{FullMethod: Pack}, call)
}

// watchDesc is the Watch stream's description, for NewStream.
var watchDesc = grpc.StreamDesc{
	StreamName:    "Watch",
	ServerStreams: true,
	Handler: func(srv any, stream grpc.ServerStream) error {
		a := srv.(*App)
		req := new(structpb.Struct)
		if err := stream.RecvMsg(req); err != nil {
			return err
		}
		for range 2 {
			if err := stream.SendMsg(a.charge(req)); err != nil {
				return err
			}
		}
		return nil
	},
}

// Register registers both test services on s, served by a, and the
// Charges service's descriptor with protoregistry.GlobalFiles (once per
// process), as generated code does.
func Register(s grpc.ServiceRegistrar, a *App) {
	registerDescriptor()
	s.RegisterService(a.chargesDesc(), a) // the stream's handler gets a as its srv
	s.RegisterService(ServiceDesc(ledgerService, map[string]Method{
		"Post": func(_ context.Context, req *structpb.Struct) (any, error) { return a.charge(req), nil },
	}), nil)
}

var registerDescriptor = sync.OnceFunc(func() {
	structType, stringType, emptyType, anyType := ".google.protobuf.Struct", ".google.protobuf.StringValue", ".google.protobuf.Empty", ".google.protobuf.Any"
	m := func(name, out string) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{Name: &name, InputType: &structType, OutputType: &out}
	}
	pack := m("Pack", structType)
	pack.InputType = &anyType
	get := m("Get", structType)
	get.Options = &descriptorpb.MethodOptions{IdempotencyLevel: descriptorpb.MethodOptions_NO_SIDE_EFFECTS.Enum()}
	watch := m("Watch", structType)
	watch.ServerStreaming = proto.Bool(true)
	fd := &descriptorpb.FileDescriptorProto{
		Name:    proto.String("idemkit/grpcsuite/charges.proto"),
		Package: proto.String("idemkit.grpcsuite"),
		Syntax:  proto.String("proto3"),
		Dependency: []string{"google/protobuf/struct.proto", "google/protobuf/wrappers.proto",
			"google/protobuf/empty.proto", "google/protobuf/any.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Charges"),
			Method: []*descriptorpb.MethodDescriptorProto{
				m("Create", structType), m("Fail", stringType), m("Panic", emptyType), m("Slow", structType),
				m("Held", structType), m("Wait", structType), get, watch, m("Empty", structType), pack,
			},
		}},
	}
	_ = emptypb.File_google_protobuf_empty_proto // the descriptor imports empty.proto: link its registration in
	file, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err == nil {
		err = protoregistry.GlobalFiles.RegisterFile(file)
	}
	if err != nil {
		panic("grpcsuite: " + err.Error())
	}
})
