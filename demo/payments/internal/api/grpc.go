package api

import (
	"bytes"
	"context"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit/demo/payments/internal/payments"
)

// ChargesCreate is the full name of the gRPC method that creates a
// charge: POST /v1/charges over gRPC, its request and reply the HTTP
// API's JSON objects as google.protobuf.Struct messages.
const ChargesCreate = "/payments.v1.Charges/Create"

// ChargesService describes the gRPC service payments.v1.Charges, as
// protoc-gen-go-grpc would write it for
//
//	service Charges { rpc Create(google.protobuf.Struct) returns (google.protobuf.Struct); }
//
// Register it with the API as its implementation. Declared by hand, it
// registers no descriptor: the server gives idemkit's interceptor the
// reply type (idemgrpc.WithReplyTypes).
func ChargesService() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "payments.v1.Charges",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Create",
			Handler: func(srv any, ctx context.Context, dec func(any) error, intercept grpc.UnaryServerInterceptor) (any, error) {
				req := new(structpb.Struct)
				if err := dec(req); err != nil {
					return nil, err
				}
				a := srv.(*API)
				handler := func(ctx context.Context, req any) (any, error) {
					return a.grpcCreateCharge(ctx, req.(*structpb.Struct))
				}
				if intercept == nil {
					return handler(ctx, req)
				}
				return intercept(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: ChargesCreate}, handler)
			},
		}},
	}
}

// GRPCAccount returns the account a call's "authorization: Bearer
// <token>" metadata names, as Account does for the HTTP header; false
// without one, or with more than one.
func GRPCAccount(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("authorization"); len(v) == 1 {
		return Account(v[0])
	}
	return "", false
}

// grpcCreateCharge is createCharge over gRPC: the request message is read
// as the HTTP body is (decode), the charge created by the same function,
// and the reply is the charge as the HTTP API writes it.
func (a *API) grpcCreateCharge(ctx context.Context, msg *structpb.Struct) (*structpb.Struct, error) {
	body, err := protojson.Marshal(msg)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "the request message cannot be read as JSON: "+err.Error())
	}
	var req payments.ChargeRequest
	if err := decodeJSON(bytes.NewReader(body), &req); err != nil {
		return nil, a.grpcStatus(ctx, err)
	}
	acct, _ := GRPCAccount(ctx)
	c, err := a.chargeUnderKey(ctx, acct, ChargesCreate, req)
	if err != nil {
		return nil, a.grpcStatus(ctx, err)
	}
	reply := new(structpb.Struct)
	if err := protojson.Unmarshal(c.FirstAnswer(), reply); err != nil {
		panic(err) // a charge's view is a JSON object
	}
	return reply, nil
}

// grpcStatus is fail over gRPC: the failure's code, and the problem's
// detail as its message. The codes of the failures fail answers with 5xx
// are codes idemkit does not record, so that a retry runs again; those of
// the 4xx, codes it records and replays.
func (a *API) grpcStatus(ctx context.Context, err error) error {
	f := a.classify(ctx, err, http.MethodPost, ChargesCreate)
	if f == failInvalid {
		_, detail := invalidDetail(err)
		return status.Error(codes.InvalidArgument, detail)
	}
	return status.Error(grpcCodes[f], failures[f].detail)
}

// grpcCodes are the gRPC codes of the failures.
var grpcCodes = map[failure]codes.Code{
	failDeclined:            codes.FailedPrecondition,
	failKeyReused:           codes.FailedPrecondition,
	failNotFound:            codes.NotFound,
	failOverRefund:          codes.FailedPrecondition,
	failLeaseLost:           codes.Aborted,
	failProviderDown:        codes.Unavailable,
	failTimedOut:            codes.Unavailable,
	failClientGone:          codes.Canceled,
	failDatabaseUnavailable: codes.Unavailable,
	failInternal:            codes.Internal,
}
