// Package idemgrpc is the gRPC adapter of idemkit: a unary server
// interceptor that makes calls safe to retry with an idempotency-key
// metadata entry, and a unary client interceptor that sends the key and
// retries with it.
//
//	engine := idem.New(idem.Config{Store: store})
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
//		recovery, authenticate, // these decide before idemkit
//		idemgrpc.UnaryServerInterceptor(engine, idemgrpc.WithScope(account)),
//	))
//
//	conn, err := grpc.NewClient(addr, creds,
//		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{})))
//
// The first call with a key runs the handler and records its reply message,
// or its status with message and details; a retry gets them back, with
// idempotent-replayed: true in the response header metadata. The call's
// fingerprint is its full method name and its request message in
// deterministic protobuf encoding, made canonical where two sendings of one
// message differ (the order of fields the server does not know, the
// encoding inside a google.protobuf.Any). The policy's other outcomes are gRPC
// codes with a google.rpc.ErrorInfo detail, and RetryInfo where a retry
// should wait (see the README's table). Streaming RPCs are not guarded:
// there is no stream interceptor, and none is needed, since no unary
// interceptor sees them.
//
// The handler runs with the lock's context: idem.HeldKey finds the key and
// owner token in it, and it is cancelled with cause idem.ErrLeaseLost if
// the lease is lost, or idem.ErrHandlerTimeout after
// idem.Config.HandlerTimeout.
package idemgrpc

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"unicode/utf8"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// KeyMetadata is the metadata entry that carries the key: the Engine's key
// header name (idem.Config.HeaderName, Idempotency-Key by default) in lower
// case, as gRPC metadata names are.
const KeyMetadata = "idempotency-key"

// ReplayedMetadata is set to "true" in the response header metadata of
// every replayed call.
const ReplayedMetadata = "idempotent-replayed"

// ContentType is the content type a call is described to the Engine with.
// The Engine hashes such a body as raw bytes: the request message in
// deterministic protobuf encoding, which is the same for every sending of
// one message by one program.
const ContentType = "application/grpc+proto"

// UnaryServerInterceptor returns a unary server interceptor that runs every
// guarded call through e (see WithMethods for which are). A call is
// described to e as what it is on the wire, an HTTP/2 POST to its full
// method name, so e must guard POST (its default): UnaryServerInterceptor
// panics if it does not, as it would otherwise let every call through
// unguarded.
//
// Chain it after the interceptors that decide first (authentication, rate
// limiting) and after a recovery interceptor: a panicking handler releases
// the key, and the panic goes on to that interceptor (without one, gRPC
// lets it crash the process).
func UnaryServerInterceptor(e *idem.Engine, opts ...Option) grpc.UnaryServerInterceptor {
	if !e.Adapter().Guards(http.MethodPost) {
		panic("idemgrpc: the Engine does not guard POST (idem.Config.Methods), which gRPC calls are: " +
			"no call would be guarded; add POST to its Methods, or use an Engine of its own for gRPC")
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	cfg := e.Config()
	keyName := strings.ToLower(cfg.HeaderName)
	s := &server{
		e:        e,
		keyName:  keyName,
		scope:    o.scope,
		key:      o.key,
		methods:  &methods{guard: o.guard, replies: o.replies},
		refuser:  newRefuser(cfg, keyName, o.key != nil),
		replayed: metadata.Pairs(ReplayedMetadata, "true"),
	}
	return s.intercept
}

type server struct {
	e        *idem.Engine
	keyName  string
	scope    func(context.Context) string
	key      func(ctx context.Context, req any) (string, bool)
	methods  *methods
	refuser  *refuser
	replayed metadata.MD
}

var (
	// Every sending of a message by one binary encodes it alike: the
	// fingerprint of a retry matches its first call's.
	deterministic = proto.MarshalOptions{Deterministic: true}
	marshalBufs   = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}
)

func (s *server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	m := s.methods.lookup(info.FullMethod)
	if !m.guarded {
		if m.keyRefused && len(metadata.ValueFromIncomingContext(ctx, s.keyName)) > 0 {
			// The caller counts on its key, which nothing here honours: a
			// retry would run the method again. Say so rather than ignore it.
			return nil, s.refuser.notAccepted
		}
		return handler(ctx, req)
	}
	msg, ok := message(req)
	if !ok {
		return nil, status.Errorf(codes.Internal, "idemgrpc: the request of %s is not a protocol buffers message", info.FullMethod)
	}
	if m.reply == nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: the reply type of %s is unknown, so its reply could not be "+
			"replayed: register its file descriptor (generated code does) or give idemgrpc.WithReplyTypes", info.FullMethod)
	}
	bp := marshalBufs.Get().(*[]byte)
	body, err := deterministic.MarshalAppend((*bp)[:0], canonical(msg))
	if err != nil {
		marshalBufs.Put(bp)
		return nil, status.Errorf(codes.InvalidArgument, "idemgrpc: the request message cannot be encoded: %v", err)
	}
	r := exchange.Request{Method: http.MethodPost, Path: info.FullMethod, ContentType: ContentType,
		Body: body, ContentLength: int64(len(body))}
	if s.key != nil {
		if key, ok := s.key(ctx, req); ok {
			r.KeyLines = []string{key}
		}
	} else {
		r.KeyLines = metadata.ValueFromIncomingContext(ctx, s.keyName)
	}
	if s.scope != nil {
		r.Scope = s.scope(ctx)
	}
	d := s.e.Adapter().Begin(ctx, r)
	// Begin has hashed the message and keeps none of it.
	if cap(body) <= 64<<10 {
		*bp = body[:0]
		marshalBufs.Put(bp)
	}
	switch {
	case d.Action == exchange.Run:
		return s.run(ctx, req, handler, d.Lock, m)
	case d.Action == exchange.Respond && d.Replayed:
		return s.replay(ctx, m, d.Response)
	case d.Action == exchange.Respond:
		return nil, s.refuser.refuse(ctx, d.Response)
	}
	return handler(ctx, req)
}

// message returns req as a protocol buffers message, whichever API
// generated it.
func message(v any) (proto.Message, bool) {
	switch m := v.(type) {
	case proto.Message:
		return m, m != nil
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(m), m != nil
	}
	return nil, false
}

// run runs the handler under lock, records its outcome and answers with
// it. The reply or status goes to the client as the handler made it
// (normalised by outcome, so that the first caller gets what every retry
// will be replayed), unless the Lock's end says it must be withheld: the
// handler's writes were rolled back with its record (a transactional
// store's commit failed, or its outcome could not be recorded), or another
// call holds the key now. The client then gets UNAVAILABLE, and its retry
// runs the handler again or gets the other call's outcome.
func (s *server) run(ctx context.Context, req any, handler grpc.UnaryHandler, lock exchange.Lock, m *method) (any, error) {
	defer lock.AbandonOnPanic(ctx)
	reply, err := handler(lock.Context(), req)
	reply, err = s.outcome(ctx, lock.Context(), m, reply, err)
	if finish(ctx, lock, reply, err).Withhold() {
		return nil, s.refuser.refuse(ctx, s.e.Adapter().WithheldResponse())
	}
	return reply, err
}

// outcome is the handler's answer as gRPC would send it, made so that it
// can be recorded and replayed alike:
//   - a nil reply with no error is the method's empty reply, which is what
//     gRPC sends for it;
//   - an error whose status has code OK (which gRPC cannot send: its
//     client gets an error, not a reply) is UNKNOWN;
//   - a status message that is not valid UTF-8 (which cannot be encoded)
//     has its invalid bytes replaced;
//   - a handler stopped by the Engine (Config.HandlerTimeout, or a lost
//     lease) that answered with its context's CANCELLED or
//     DEADLINE_EXCEEDED, while its caller cancelled nothing, is UNAVAILABLE
//     with a RetryInfo: the caller may retry at once with its key.
func (s *server) outcome(ctx, lctx context.Context, m *method, reply any, err error) (any, error) {
	if err == nil {
		if reply == nil {
			return m.reply.New().Interface(), nil
		}
		return reply, nil
	}
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	switch code := st.Code(); {
	case code == codes.OK:
		return nil, status.Errorf(codes.Unknown, "idemgrpc: the handler returned an error with code OK, which is no answer: %s", st.Message())
	case (code == codes.Canceled || code == codes.DeadlineExceeded) && ctx.Err() == nil && stoppedByEngine(lctx):
		return nil, s.refuser.stopped(ctx, context.Cause(lctx))
	case !utf8.ValidString(st.Message()):
		p := st.Proto()
		p.Message = strings.ToValidUTF8(p.Message, "\uFFFD")
		return nil, status.ErrorProto(p)
	}
	return nil, err
}

// stoppedByEngine reports whether the Engine cancelled the handler's
// context lctx: its HandlerTimeout, or a lost lease.
func stoppedByEngine(lctx context.Context) bool {
	cause := context.Cause(lctx)
	return errors.Is(cause, idem.ErrHandlerTimeout) || errors.Is(cause, idem.ErrLeaseLost)
}

// finish ends lock with the handler's outcome (see outcome): its reply
// message, or its status (converted as the gRPC server converts it for the
// client), and reports what became of it. What cannot be encoded is not
// recorded.
func finish(ctx context.Context, lock exchange.Lock, reply any, err error) exchange.Finished {
	var out proto.Message
	code := codes.OK
	if err != nil {
		st, ok := status.FromError(err)
		if !ok {
			st = status.FromContextError(err)
		}
		out, code = st.Proto(), st.Code()
	} else if m, ok := message(reply); ok {
		out = m
	} else {
		return lock.Abandon(ctx, exchange.ReasonIncomplete)
	}
	if !Recorded(code) && code != codes.OK {
		return lock.Finish(ctx, lockStatus(code), nil)
	}
	bp := marshalBufs.Get().(*[]byte)
	defer marshalBufs.Put(bp)
	body, merr := proto.MarshalOptions{}.MarshalAppend((*bp)[:0], out)
	if merr != nil {
		return lock.Abandon(ctx, exchange.ReasonIncomplete)
	}
	_, _ = lock.Write(body) // copies body, and stops copying past Config.MaxResponseBody
	if cap(body) <= 64<<10 {
		*bp = body[:0]
	}
	return lock.Finish(ctx, lockStatus(code), nil)
}

// replay answers a call with the outcome recorded for its key: the reply
// message, decoded into a new message of the method's reply type, or the
// status with its message and details.
func (s *server) replay(ctx context.Context, m *method, resp exchange.Response) (any, error) {
	if stream := grpc.ServerTransportStreamFromContext(ctx); stream != nil { // none outside a gRPC server: nobody to tell
		_ = stream.SetHeader(s.replayed)
	}
	code, ok := recordedCode(resp.Status)
	switch {
	case !ok:
		return nil, status.Errorf(codes.Internal, "idemgrpc: the key's record holds an HTTP response (status %d), not a call's", resp.Status)
	case code == codes.OK:
		reply := m.reply.New().Interface()
		if err := proto.Unmarshal(resp.Body, reply); err != nil {
			return nil, status.Errorf(codes.Internal, "idemgrpc: the recorded reply does not decode as %s: %v", m.reply.Descriptor().FullName(), err)
		}
		return reply, nil
	}
	var st spb.Status
	if err := proto.Unmarshal(resp.Body, &st); err != nil {
		return nil, status.Errorf(codes.Internal, "idemgrpc: the recorded status does not decode: %v", err)
	}
	return nil, status.ErrorProto(&st)
}
