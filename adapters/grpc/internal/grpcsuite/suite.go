package grpcsuite

import (
	"cmp"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	idemgrpc "github.com/idemkit/idemkit/adapters/grpc"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// ProblemBase is the problem type base URI the suite configures.
const ProblemBase = "https://problems.idemkit.test/"

// The suite's limits, small so the size cases stay fast.
const (
	MaxRequestBody  = 8192
	MaxResponseBody = 4096
)

// Run drives a server on loopback, its Engine on a store from newStore
// (a fresh one per case), through every behaviour of the policy.
func Run(t *testing.T, newStore func(testing.TB) idem.Store) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.run(t, NewEnv(t, newStore(t), c.config, c.opts...))
		})
	}
}

type suiteCase struct {
	name   string
	config func(*idem.Config) // nil: the suite's defaults
	opts   []idemgrpc.Option  // the interceptor's, after the suite's scope
	run    func(*testing.T, *Env)
}

// Env is one server on loopback with its Engine's clock, its application
// and a client.
type Env struct {
	App        *App
	Clock      *idemtest.Clock
	Engine     *idem.Engine
	Conn       *grpc.ClientConn
	lease      time.Duration
	retryAfter time.Duration
}

// NewEnv serves the test services behind the interceptor, for an Engine
// on store with the suite's settings (a manual clock, small limits),
// configure applied to them, and dials it.
func NewEnv(t *testing.T, store idem.Store, configure func(*idem.Config), opts ...idemgrpc.Option) *Env {
	t.Helper()
	clock := idemtest.NewClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := idem.Config{
		Store:           store,
		Clock:           clock,
		MaxRequestBody:  MaxRequestBody,
		MaxResponseBody: MaxResponseBody,
		ProblemBase:     ProblemBase,
		Logger:          slog.New(slog.DiscardHandler),
	}
	if configure != nil {
		configure(&cfg)
	}
	e := idem.New(cfg)
	a := NewApp()
	addr := Serve(t, e, a, opts...)
	return &Env{App: a, Clock: clock, Engine: e, Conn: Dial(t, addr),
		lease: e.Config().Lease, retryAfter: e.Config().RetryAfter}
}

// Call is one call of a case.
type Call struct {
	Method string // default Create
	Key    string // sent as one metadata value unless NoKey or Keys is set
	Keys   []string
	NoKey  bool
	Tenant string
	Req    map[string]any // the request Struct; default {"amount": 1999}
	// Msg, if set, is the request message instead of the Struct of Req.
	Msg proto.Message
	// Unknown is appended to the request message as fields the server
	// does not know, as a client one schema version ahead sends them.
	Unknown []byte
}

// Result is what a call got.
type Result struct {
	Reply   proto.Message
	Err     error
	Header  metadata.MD
	Trailer metadata.MD
}

// Replayed reports whether the answer says it is a replay.
func (r *Result) Replayed() bool { return idemgrpc.Replayed(r.Header) }

// Code is the call's status code.
func (r *Result) Code() codes.Code { return status.Code(r.Err) }

// NewReply returns an empty reply of a method of the test services.
func NewReply(method string) proto.Message {
	switch method {
	case Fail:
		return new(wrapperspb.StringValue)
	case Panic:
		return new(emptypb.Empty)
	}
	return new(structpb.Struct)
}

// Request returns the request Struct of fields, {"amount": 1999} if nil.
// It panics on a value structpb cannot hold: the cases' values are fixed.
func Request(fields map[string]any) *structpb.Struct {
	if fields == nil {
		fields = map[string]any{"amount": 1999}
	}
	s, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	return s
}

// Send makes the call c on conn; it is safe for concurrent use.
func Send(conn *grpc.ClientConn, c Call) *Result {
	method := cmp.Or(c.Method, Create)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md := metadata.MD{}
	switch {
	case c.Keys != nil:
		md[idemgrpc.KeyMetadata] = c.Keys
	case !c.NoKey:
		md.Set(idemgrpc.KeyMetadata, c.Key)
	}
	if c.Tenant != "" {
		md.Set(TenantMetadata, c.Tenant)
	}
	r := &Result{Reply: NewReply(method)}
	var req proto.Message = Request(c.Req)
	if c.Msg != nil {
		req = proto.Clone(c.Msg)
	}
	if c.Unknown != nil {
		req.ProtoReflect().SetUnknown(c.Unknown)
	}
	r.Err = conn.Invoke(metadata.NewOutgoingContext(ctx, md), method, req, r.Reply,
		grpc.Header(&r.Header), grpc.Trailer(&r.Trailer))
	return r
}

// Send makes the call c.
func (e *Env) Send(c Call) *Result { return Send(e.Conn, c) }

// Must makes the call c and fails the test unless it succeeds.
func (e *Env) Must(t *testing.T, c Call) *Result {
	t.Helper()
	r := e.Send(c)
	if r.Err != nil {
		t.Fatalf("%s: %v", cmp.Or(c.Method, Create), r.Err)
	}
	return r
}

// WantCalls fails the test unless the handlers ran n calls.
func (e *Env) WantCalls(t *testing.T, n int64) {
	t.Helper()
	if got := e.App.Calls(); got != n {
		t.Fatalf("the handlers ran %d calls, want %d", got, n)
	}
}

// WaitEntered waits for a call to enter Slow, Wait or Held.
func (e *Env) WaitEntered(t *testing.T) {
	t.Helper()
	WaitEntered(t, e.App)
}

// WaitEntered waits for a call to enter a's Slow, Wait or Held.
func WaitEntered(t *testing.T, a *App) {
	t.Helper()
	select {
	case <-a.Entered():
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never started")
	}
}

// WantReplay fails the test unless r is a replay of first: the same reply,
// or the same status with the same message and details.
func WantReplay(t *testing.T, first, r *Result) {
	t.Helper()
	if first.Replayed() {
		t.Fatalf("the first call's answer says it is a replay (header %v)", first.Header)
	}
	if !r.Replayed() {
		t.Fatalf("the retry's answer is not marked as a replay (header %v, error %v)", r.Header, r.Err)
	}
	if first.Err != nil || r.Err != nil {
		if !proto.Equal(status.Convert(first.Err).Proto(), status.Convert(r.Err).Proto()) {
			t.Fatalf("replayed status %v, the first call got %v", status.Convert(r.Err).Proto(), status.Convert(first.Err).Proto())
		}
		return
	}
	if !proto.Equal(first.Reply, r.Reply) {
		t.Fatalf("replayed reply %v, the first call got %v", r.Reply, first.Reply)
	}
}

// WantRefusal fails the test unless r is the interceptor's refusal for
// problem: code, an ErrorInfo naming the problem, and when to retry if
// retry is set (RetryInfo and the grpc-retry-pushback-ms trailer).
func (e *Env) WantRefusal(t *testing.T, r *Result, code codes.Code, problem string, retry bool) {
	t.Helper()
	st := status.Convert(r.Err)
	if st.Code() != code {
		t.Fatalf("got %v, want %v (%s)", r.Err, code, problem)
	}
	var info *errdetails.ErrorInfo
	var delay *errdetails.RetryInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.RetryInfo:
			delay = d
		}
	}
	reason := strings.ToUpper(strings.ReplaceAll(problem, "-", "_"))
	if info == nil || info.Reason != reason || info.Domain != idemgrpc.ErrorDomain || info.Metadata["type"] != ProblemBase+problem {
		t.Fatalf("ErrorInfo %v, want reason %s, domain %s and type %s", info, reason, idemgrpc.ErrorDomain, ProblemBase+problem)
	}
	if st.Message() == "" {
		t.Fatal("a refusal without a message")
	}
	pushback := r.Trailer.Get("grpc-retry-pushback-ms")
	switch {
	case retry && (delay == nil || delay.GetRetryDelay().AsDuration() != e.retryAfter):
		t.Fatalf("RetryInfo %v, want a delay of %v", delay, e.retryAfter)
	case retry && (len(pushback) != 1 || pushback[0] != "1000"):
		t.Fatalf("grpc-retry-pushback-ms %q, want 1000", pushback)
	case !retry && (delay != nil || len(pushback) != 0):
		t.Fatalf("%v refusal with RetryInfo %v and pushback %q: no retry cures it", code, delay, pushback)
	}
	if r.Replayed() {
		t.Fatal("a refusal marked as a replay")
	}
}

func recv(t *testing.T, ch <-chan *Result, what string) *Result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(15 * time.Second):
		t.Fatalf("no %s", what)
		return nil
	}
}

// field returns a field of a Struct reply.
func field(r *Result, name string) *structpb.Value {
	s, _ := r.Reply.(*structpb.Struct)
	return s.GetFields()[name]
}
