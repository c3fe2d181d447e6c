package idemgrpc_test

import (
	"context"
	"strings"
	"testing"
	"time"

	idemgrpc "github.com/idemkit/idemkit/adapters/grpc"
	"github.com/idemkit/idemkit/adapters/grpc/internal/grpcsuite"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/memstore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

func memStore(tb testing.TB) idem.Store {
	s := memstore.New(memstore.WithPurgeInterval(0))
	tb.Cleanup(func() { s.Close() })
	return s
}

func TestWithMethods(t *testing.T) {
	e := grpcsuite.NewEnv(t, memStore(t), nil,
		idemgrpc.WithMethods(func(m string) bool { return m == grpcsuite.Create }))
	// Held is no longer guarded: no key needed, no lock held.
	r := e.Must(t, grpcsuite.Call{Method: grpcsuite.Held, NoKey: true})
	if held := r.Reply.(*structpb.Struct).Fields["held"].GetBoolValue(); held {
		t.Fatal("a method WithMethods leaves out ran under a lock")
	}
	e.WantRefusal(t, e.Send(grpcsuite.Call{NoKey: true}), codes.InvalidArgument, exchange.ProblemKeyMissing, false)
	// Get, which WithMethods does not list either, passes too.
	e.Must(t, grpcsuite.Call{Method: grpcsuite.Get, NoKey: true})
}

func TestWithMethodsGuardsWhatTheDescriptorLeavesOut(t *testing.T) {
	e := grpcsuite.NewEnv(t, memStore(t), nil, idemgrpc.WithMethods(func(string) bool { return true }))
	e.WantRefusal(t, e.Send(grpcsuite.Call{Method: grpcsuite.Get, NoKey: true}), codes.InvalidArgument, exchange.ProblemKeyMissing, false)
	first := e.Must(t, grpcsuite.Call{Method: grpcsuite.Get, Key: "k1"})
	grpcsuite.WantReplay(t, first, e.Send(grpcsuite.Call{Method: grpcsuite.Get, Key: "k1"}))
}

func TestReplyTypeUnknown(t *testing.T) {
	// Ledger has no registered descriptor: without WithReplyTypes its
	// reply could not be replayed, so the call is refused before it runs.
	e := grpcsuite.NewEnv(t, memStore(t), nil)
	r := e.Send(grpcsuite.Call{Method: grpcsuite.Post, Key: "k1"})
	if r.Code() != codes.Internal || !strings.Contains(status.Convert(r.Err).Message(), "WithReplyTypes") {
		t.Fatalf("got %v, want INTERNAL naming WithReplyTypes", r.Err)
	}
	e.WantCalls(t, 0)
}

func TestWithReplyType(t *testing.T) {
	e := grpcsuite.NewEnv(t, memStore(t), nil, idemgrpc.WithReplyTypes(map[string]proto.Message{grpcsuite.Post: &structpb.Struct{}}))
	first := e.Must(t, grpcsuite.Call{Method: grpcsuite.Post, Key: "k1"})
	grpcsuite.WantReplay(t, first, e.Send(grpcsuite.Call{Method: grpcsuite.Post, Key: "k1"}))
	e.WantCalls(t, 1)
}

func TestWithKey(t *testing.T) {
	// The key is a field of the request message, as AIP-155's request_id.
	fromRequest := idemgrpc.WithKey(func(_ context.Context, req any) (string, bool) {
		id := req.(*structpb.Struct).GetFields()["request_id"]
		return id.GetStringValue(), id != nil
	})
	e := grpcsuite.NewEnv(t, memStore(t), nil, fromRequest)
	req := map[string]any{"amount": 1999, "request_id": "r-1"}
	first := e.Must(t, grpcsuite.Call{NoKey: true, Req: req})
	// The metadata entry is not read, whatever it says.
	grpcsuite.WantReplay(t, first, e.Send(grpcsuite.Call{Key: "other", Req: req}))
	e.WantRefusal(t, e.Send(grpcsuite.Call{Key: "k1"}), codes.InvalidArgument, exchange.ProblemKeyMissing, false)
	e.WantRefusal(t, e.Send(grpcsuite.Call{NoKey: true, Req: map[string]any{"request_id": "a, b"}}),
		codes.InvalidArgument, exchange.ProblemKeyInvalid, false)
	e.WantCalls(t, 1)
}

func TestKeyMetadataFollowsHeaderName(t *testing.T) {
	e := grpcsuite.NewEnv(t, memStore(t), func(c *idem.Config) { c.HeaderName = "X-Request-Key" })
	// The default entry is not the key any more...
	r := e.Send(grpcsuite.Call{Key: "k1"})
	e.WantRefusal(t, r, codes.InvalidArgument, exchange.ProblemKeyMissing, false)
	if msg := status.Convert(r.Err).Message(); !strings.Contains(msg, "x-request-key") {
		t.Fatalf("the refusal %q does not name the metadata entry", msg)
	}
	// ...x-request-key is.
	grpcsuite.WantReplay(t, sendWithEntry(t, e, "x-request-key", "k1"), sendWithEntry(t, e, "x-request-key", "k1"))
}

func TestEngineMustGuardPost(t *testing.T) {
	e := idem.New(idem.Config{Store: memStore(t), Methods: []string{"PATCH"}})
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), "POST") {
			t.Fatalf("got panic %v, want one naming POST", p)
		}
	}()
	idemgrpc.UnaryServerInterceptor(e)
}

// sendWithEntry calls Create with the key in a metadata entry of that name.
func sendWithEntry(t *testing.T, e *grpcsuite.Env, name, key string) *grpcsuite.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r := &grpcsuite.Result{Reply: new(structpb.Struct)}
	ctx = metadata.AppendToOutgoingContext(ctx, name, key)
	r.Err = e.Conn.Invoke(ctx, grpcsuite.Create, grpcsuite.Request(nil), r.Reply, grpc.Header(&r.Header))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return r
}
