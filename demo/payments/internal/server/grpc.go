package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	idemgrpc "github.com/idemkit/idemkit/adapters/grpc"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
)

// NewGRPC builds the gRPC server, which serves api.ChargesCreate on the
// same Engine as the HTTP API, so a key is one key whichever way it came.
// Its chain is the /v1 chain's: the call log, panic recovery (a panic is
// INTERNAL), authentication (the "authorization: Bearer <token>" metadata
// names the account the HTTP header would; without it UNAUTHENTICATED,
// before idemkit, so nothing is recorded), the transaction slot, and
// idemkit's interceptor, its scope the account's (api.AccountScope), as the
// HTTP scope is.
func NewGRPC(cfg Config) Server {
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		logCalls(cfg.Logger),
		recoverCalls(cfg.API),
		authenticateCalls(cfg.API),
		txSlotCalls,
		idemgrpc.UnaryServerInterceptor(cfg.Engine,
			idemgrpc.WithScope(func(ctx context.Context) string {
				acct, _ := api.GRPCAccount(ctx)
				return api.AccountScope(acct)
			}),
			idemgrpc.WithReplyTypes(map[string]proto.Message{api.ChargesCreate: &structpb.Struct{}})),
	))
	srv.RegisterService(api.ChargesService(), cfg.API)
	return &grpcServer{srv: srv}
}

// logCalls writes one structured line per call, as logRequests does per
// request.
func logCalls(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		start := time.Now()
		reply, err := next(ctx, req)
		log.LogAttrs(ctx, slog.LevelInfo, "call", slog.String("method", info.FullMethod),
			slog.String("code", status.Code(err).String()), slog.Duration("duration", time.Since(start)))
		return reply, err
	}
}

// recoverCalls turns a panic into INTERNAL, as recoverPanics turns one
// into a 500; idemkit's interceptor has already released the key.
func recoverCalls(a *api.API) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (reply any, err error) {
		defer func() {
			if p := recover(); p != nil {
				a.Logger.ErrorContext(ctx, "panic", "panic", p)
				reply, err = nil, status.Error(codes.Internal, "The call failed. No charge was made; retry with the same idempotency-key.")
			}
		}()
		return next(ctx, req)
	}
}

// authenticateCalls refuses a call without a bearer token, before idemkit.
func authenticateCalls(a *api.API) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		if _, ok := api.GRPCAccount(ctx); !ok {
			grpc.SetHeader(ctx, metadata.Pairs("www-authenticate", `Bearer realm="payments demo"`))
			return nil, status.Error(codes.Unauthenticated, "Send authorization: Bearer <token> metadata; any non-empty token names an account.")
		}
		return next(ctx, req)
	}
}

// txSlotCalls gives the call a transaction slot (gormstore.WithTxSlot),
// so that the charge commits with its record.
func txSlotCalls(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	ctx, done := gormstore.WithTxSlot(ctx)
	defer done()
	return next(ctx, req)
}

type grpcServer struct{ srv *grpc.Server }

func (s *grpcServer) Serve(ln net.Listener) error {
	if err := s.srv.Serve(ln); !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// Shutdown stops taking calls and waits for the running ones
// (GracefulStop) until ctx ends, then ends them (Stop).
func (s *grpcServer) Shutdown(ctx context.Context) error {
	stopped := make(chan struct{})
	go func() {
		s.srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
		s.srv.Stop()
		<-stopped
		return ctx.Err()
	}
}
