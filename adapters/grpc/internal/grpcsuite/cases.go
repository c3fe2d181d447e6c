package grpcsuite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	idemgrpc "github.com/idemkit/idemkit/adapters/grpc"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// The codes a handler's status is recorded with, and those it is not.
var (
	recordedCodes = []codes.Code{codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unauthenticated}
	// UNIMPLEMENTED and DATA_LOSS are HTTP's 501 and 500, which are never
	// recorded either.
	notRecordedCodes = []codes.Code{codes.Canceled, codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted,
		codes.Aborted, codes.Internal, codes.Unavailable, codes.Unimplemented, codes.DataLoss}
)

var cases = []suiteCase{
	{name: "FirstCall/RunsHandler", run: func(t *testing.T, e *Env) {
		r := e.Must(t, Call{Key: "k1"})
		if r.Replayed() || field(r, "id").GetStringValue() != "ch_1" {
			t.Fatalf("first call: %v, header %v", r.Reply, r.Header)
		}
		e.WantCalls(t, 1)
	}},
	{name: "Replay/SameReply", run: func(t *testing.T, e *Env) {
		first := e.Must(t, Call{Key: "k1"})
		WantReplay(t, first, e.Send(Call{Key: "k1"}))
		WantReplay(t, first, e.Send(Call{Key: `"k1"`})) // the same key as an sf-string
		e.WantCalls(t, 1)
	}},
	{name: "Replay/ReplyTypeOfTheMethod", run: func(t *testing.T, e *Env) {
		// Fail's reply is a StringValue, Create's a Struct: each replay is
		// decoded as its own method's.
		first := e.Must(t, Call{Method: Fail, Key: "k1", Req: map[string]any{"code": 0}})
		r := e.Send(Call{Method: Fail, Key: "k1", Req: map[string]any{"code": 0}})
		WantReplay(t, first, r)
		if s := r.Reply.ProtoReflect().Descriptor().FullName(); s != "google.protobuf.StringValue" {
			t.Fatalf("replayed a %s", s)
		}
		e.WantCalls(t, 1)
	}},
	{name: "Replay/MapOrder", run: func(t *testing.T, e *Env) {
		// A Struct is a map: each sending may encode its members in another
		// order, and the deterministic encoding of the fingerprint does not.
		fields := map[string]any{}
		for i := range 20 {
			fields[fmt.Sprintf("f%02d", i)] = i
		}
		first := e.Must(t, Call{Key: "k1", Req: fields})
		for range 5 {
			WantReplay(t, first, e.Send(Call{Key: "k1", Req: fields}))
		}
		e.WantCalls(t, 1)
	}},
	{name: "Replay/RecordedCodes", run: func(t *testing.T, e *Env) {
		for _, code := range recordedCodes {
			key := "k-" + code.String()
			req := map[string]any{"code": int(code), "message": "refused"}
			first := e.Send(Call{Method: Fail, Key: key, Req: req})
			if first.Code() != code || len(status.Convert(first.Err).Details()) != 1 {
				t.Fatalf("the handler's %v came back as %v", code, first.Err)
			}
			WantReplay(t, first, e.Send(Call{Method: Fail, Key: key, Req: req}))
		}
		e.WantCalls(t, int64(len(recordedCodes)))
	}},
	{name: "NotStored/Codes", run: func(t *testing.T, e *Env) {
		for _, code := range notRecordedCodes {
			key := "k-" + code.String()
			req := map[string]any{"code": int(code), "message": "try again"}
			for i := range 2 {
				if r := e.Send(Call{Method: Fail, Key: key, Req: req}); r.Code() != code || r.Replayed() {
					t.Fatalf("%v, call %d: got %v (replayed %v), want the handler's own answer", code, i+1, r.Err, r.Replayed())
				}
			}
		}
		e.WantCalls(t, int64(2*len(notRecordedCodes)))
	}},
	{name: "NotStored/Panic", run: func(t *testing.T, e *Env) {
		for i := range 2 {
			if r := e.Send(Call{Method: Panic, Key: "k1"}); r.Code() != codes.Internal || r.Replayed() {
				t.Fatalf("call %d: %v, want the recovery interceptor's INTERNAL", i+1, r.Err)
			}
		}
		e.WantCalls(t, 2)
	}},
	{name: "NotStored/ReplyTooLarge", run: func(t *testing.T, e *Env) {
		big := map[string]any{"amount": strings.Repeat("x", MaxResponseBody)}
		for i := range 2 {
			r := e.Must(t, Call{Key: "k1", Req: big})
			if r.Replayed() || field(r, "call").GetNumberValue() != float64(i+1) {
				t.Fatalf("call %d: %v (replayed %v), want the handler run again", i+1, field(r, "call"), r.Replayed())
			}
		}
		e.WantCalls(t, 2)
	}},
	{name: "Mismatch/Request", run: func(t *testing.T, e *Env) {
		first := e.Must(t, Call{Key: "k1"})
		e.WantRefusal(t, e.Send(Call{Key: "k1", Req: map[string]any{"amount": 2000}}), codes.FailedPrecondition, exchange.ProblemKeyReused, false)
		e.WantRefusal(t, e.Send(Call{Key: "k1", Req: map[string]any{}}), codes.FailedPrecondition, exchange.ProblemKeyReused, false)
		WantReplay(t, first, e.Send(Call{Key: "k1"}))
		e.WantCalls(t, 1)
	}},
	{name: "Mismatch/Method", run: func(t *testing.T, e *Env) {
		first := e.Must(t, Call{Key: "k1"})
		e.WantRefusal(t, e.Send(Call{Method: Held, Key: "k1"}), codes.FailedPrecondition, exchange.ProblemKeyReused, false)
		WantReplay(t, first, e.Send(Call{Key: "k1"}))
		e.WantCalls(t, 1)
	}},
	{name: "Conflict/InFlight", run: func(t *testing.T, e *Env) {
		done := make(chan *Result, 1)
		go func() { done <- e.Send(Call{Method: Slow, Key: "k1"}) }()
		e.WaitEntered(t)
		e.WantRefusal(t, e.Send(Call{Method: Slow, Key: "k1"}), codes.Aborted, exchange.ProblemInProgress, true)
		// Another request message is a mismatch, even while the first runs.
		e.WantRefusal(t, e.Send(Call{Method: Slow, Key: "k1", Req: map[string]any{"amount": 2}}),
			codes.FailedPrecondition, exchange.ProblemKeyReused, false)
		e.App.ReleaseSlow()
		first := recv(t, done, "answer to the first call")
		if first.Err != nil {
			t.Fatal(first.Err)
		}
		WantReplay(t, first, e.Send(Call{Method: Slow, Key: "k1"}))
		e.WantCalls(t, 1)
	}},
	{name: "Concurrent/OneExecution", run: func(t *testing.T, e *Env) {
		const n = 20
		results := make(chan *Result, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				<-start
				results <- e.Send(Call{Method: Slow, Key: "k-storm"})
			})
		}
		close(start)
		e.WaitEntered(t)
		// Let the others collect their refusals before the one execution ends.
		deadline := time.Now().Add(10 * time.Second)
		for len(results) < n-1 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		e.App.ReleaseSlow()
		wg.Wait()
		close(results)
		fresh, conflicts, replays := 0, 0, 0
		for r := range results {
			switch {
			case r.Err == nil && !r.Replayed():
				fresh++
			case r.Err == nil:
				replays++
			case r.Code() == codes.Aborted:
				conflicts++
			default:
				t.Fatalf("unexpected answer %v", r.Err)
			}
		}
		if fresh != 1 || conflicts+replays != n-1 {
			t.Fatalf("%d concurrent calls: %d ran, %d refused as in progress, %d replays", n, fresh, conflicts, replays)
		}
		e.WantCalls(t, 1)
	}},
	{name: "Key/Missing", run: func(t *testing.T, e *Env) {
		e.WantRefusal(t, e.Send(Call{NoKey: true}), codes.InvalidArgument, exchange.ProblemKeyMissing, false)
		e.WantCalls(t, 0)
	}},
	{name: "Key/Invalid", run: func(t *testing.T, e *Env) {
		for _, keys := range [][]string{{`"unterminated`}, {"k1", "k2"}, {"k1", "k1"}, {"a, b"}, {""}, {strings.Repeat("k", 256)}} {
			r := e.Send(Call{Keys: keys})
			e.WantRefusal(t, r, codes.InvalidArgument, exchange.ProblemKeyInvalid, false)
		}
		e.WantCalls(t, 0)
	}},
	{name: "Key/Optional", config: func(c *idem.Config) { c.KeyOptional = true }, run: func(t *testing.T, e *Env) {
		for i := range 2 {
			if r := e.Must(t, Call{NoKey: true}); r.Replayed() {
				t.Fatalf("call %d without a key was replayed", i+1)
			}
		}
		first := e.Must(t, Call{Key: "k1"})
		WantReplay(t, first, e.Send(Call{Key: "k1"}))
		e.WantCalls(t, 3)
	}},
	{name: "Scope/TenantsApart", run: func(t *testing.T, e *Env) {
		a := e.Must(t, Call{Key: "k1", Tenant: "acct_a"})
		b := e.Must(t, Call{Key: "k1", Tenant: "acct_b"})
		if a.Replayed() || b.Replayed() || proto.Equal(a.Reply, b.Reply) {
			t.Fatalf("two tenants' first calls: %v and %v", a.Reply, b.Reply)
		}
		// A tenant's call with another message is not refused for the other's.
		e.Must(t, Call{Key: "k2", Tenant: "acct_a"})
		e.Must(t, Call{Key: "k2", Tenant: "acct_b", Req: map[string]any{"amount": 5}})
		WantReplay(t, a, e.Send(Call{Key: "k1", Tenant: "acct_a"}))
		WantReplay(t, b, e.Send(Call{Key: "k1", Tenant: "acct_b"}))
		e.WantCalls(t, 4)
	}},
	{name: "Context/HeldKey", run: func(t *testing.T, e *Env) {
		a := e.Must(t, Call{Method: Held, Key: "k-held", Tenant: "acct_a"})
		b := e.Must(t, Call{Method: Held, Key: "k-held", Tenant: "acct_b"})
		if !field(a, "held").GetBoolValue() || field(a, "key").GetStringValue() != "k-held" ||
			field(a, "scope").GetStringValue() != "acct_a" || field(a, "token").GetStringValue() == "" {
			t.Fatalf("the handler saw %v, want its key, scope and a token", a.Reply)
		}
		if field(b, "token").GetStringValue() == field(a, "token").GetStringValue() || field(b, "scope").GetStringValue() != "acct_b" {
			t.Fatalf("two holders saw %v and %v: their tokens must differ", a.Reply, b.Reply)
		}
	}},
	{name: "Context/LeaseLostCancels", config: cutOffRenewals, run: func(t *testing.T, e *Env) {
		// The lease runs out while the handler runs, every renewal failing:
		// the handler's context is cancelled with ErrLeaseLost before
		// another call may take the key over.
		done := make(chan *Result, 1)
		go func() { done <- e.Send(Call{Method: Wait, Key: "k-lost"}) }()
		e.WaitEntered(t)
		e.Clock.Advance(e.lease)
		r := recv(t, done, "answer of the handler")
		if r.Code() != codes.Unavailable || !strings.Contains(status.Convert(r.Err).Message(), idem.ErrLeaseLost.Error()) {
			t.Fatalf("the handler answered %v, want its context cancelled with ErrLeaseLost", r.Err)
		}
	}},
	{name: "Context/HandlerTimeout", config: func(c *idem.Config) { c.HandlerTimeout = 50 * time.Millisecond }, run: func(t *testing.T, e *Env) {
		for i := range 2 {
			done := make(chan *Result, 1)
			go func() { done <- e.Send(Call{Method: Wait, Key: "k-slow"}) }()
			e.WaitEntered(t)
			e.Clock.Advance(50 * time.Millisecond)
			r := recv(t, done, "answer of the handler")
			if r.Code() != codes.Unavailable || !strings.Contains(status.Convert(r.Err).Message(), idem.ErrHandlerTimeout.Error()) {
				t.Fatalf("call %d: the handler answered %v, want its context cancelled with ErrHandlerTimeout", i+1, r.Err)
			}
		}
		e.WantCalls(t, 2) // not recorded: the key was released once the handler returned
	}},
	{name: "Lease/TakeoverAfterCrash", config: cutOffRenewals, run: func(t *testing.T, e *Env) {
		// The first holder hangs, cut off from the store (as a crashed or
		// partitioned instance would be), past its lease.
		done := make(chan *Result, 1)
		go func() { done <- e.Send(Call{Method: Slow, Key: "k1"}) }()
		e.WaitEntered(t)
		e.Clock.Advance(e.lease + time.Second)
		second := make(chan *Result, 1)
		go func() { second <- e.Send(Call{Method: Slow, Key: "k1"}) }()
		e.WaitEntered(t)
		e.App.ReleaseSlow()
		old, taken := recv(t, done, "answer of the first holder"), recv(t, second, "answer of the new holder")
		if taken.Err != nil {
			t.Fatalf("the new holder's answer: %v", taken.Err)
		}
		// The old holder's reply is not the key's outcome: it is withheld,
		// and its caller's retry gets the new holder's.
		e.WantRefusal(t, old, codes.Unavailable, exchange.ProblemStoreUnavailable, true)
		WantReplay(t, taken, e.Send(Call{Method: Slow, Key: "k1"}))
		e.WantCalls(t, 2)
	}},
	{name: "Expiry/ShortTTL", config: func(c *idem.Config) { c.TTL = time.Minute }, run: func(t *testing.T, e *Env) {
		first := e.Must(t, Call{Key: "k1"})
		WantReplay(t, first, e.Send(Call{Key: "k1"}))
		e.Clock.Advance(time.Minute)
		if r := e.Must(t, Call{Key: "k1"}); r.Replayed() {
			t.Fatal("an expired key was replayed")
		}
		e.WantCalls(t, 2)
	}},
	{name: "Body/TooLarge", run: func(t *testing.T, e *Env) {
		big := map[string]any{"amount": strings.Repeat("x", MaxRequestBody)}
		e.WantRefusal(t, e.Send(Call{Key: "k1", Req: big}), codes.ResourceExhausted, exchange.ProblemPayloadTooLarge, false)
		e.WantCalls(t, 0)
		// Nothing recorded: the key is free for a call within the limit.
		e.Must(t, Call{Key: "k1"})
		e.WantCalls(t, 1)
	}},
	{name: "PassThrough/NoSideEffects", run: func(t *testing.T, e *Env) {
		for _, c := range []Call{{Method: Get, Key: "k1"}, {Method: Get, Key: "k1"}, {Method: Get, NoKey: true}, {Method: Get, Keys: []string{"a", "b"}}} {
			if r := e.Must(t, c); r.Replayed() {
				t.Fatalf("%+v was replayed", c)
			}
		}
		e.WantCalls(t, 4)
		// Nothing was recorded for k1.
		if r := e.Must(t, Call{Key: "k1"}); r.Replayed() {
			t.Fatal("a key used on a method that is not guarded was recorded")
		}
	}},
	{name: "PassThrough/Streaming", run: func(t *testing.T, e *Env) {
		for i := range 2 {
			if n := watch(t, e, "k1"); n != 2 {
				t.Fatalf("stream %d: %d messages, want 2", i+1, n)
			}
		}
		e.WantCalls(t, 4)
	}},
	{name: "Store/Unavailable", config: StoreUnreachable, run: func(t *testing.T, e *Env) {
		e.WantRefusal(t, e.Send(Call{Key: "k1"}), codes.Unavailable, exchange.ProblemStoreUnavailable, true)
		e.WantCalls(t, 0)
	}},
	{name: "Store/Full", config: StoreFull, run: func(t *testing.T, e *Env) {
		e.WantRefusal(t, e.Send(Call{Key: "k1"}), codes.ResourceExhausted, exchange.ProblemStoreFull, true)
		e.WantCalls(t, 0)
	}},
	{name: "Store/RolledBackNotDelivered", config: func(c *idem.Config) { c.Store = &rollsBackOnce{Store: c.Store} }, run: func(t *testing.T, e *Env) {
		// The handler's work was undone with the failed completion: its
		// reply must not reach the client, whose retry runs it again.
		e.WantRefusal(t, e.Send(Call{Key: "k1"}), codes.Unavailable, exchange.ProblemStoreUnavailable, true)
		second := e.Must(t, Call{Key: "k1"})
		if second.Replayed() {
			t.Fatal("the retry after a rolled-back completion was replayed")
		}
		WantReplay(t, second, e.Send(Call{Key: "k1"}))
		e.WantCalls(t, 2)
	}},
	{name: "Store/LockLostWithheld", config: func(c *idem.Config) { c.Store = &losesLockOnce{Store: c.Store} }, run: func(t *testing.T, e *Env) {
		// Another call holds the key by the time the reply is recorded (an
		// operator forgot the record): the reply is not the key's outcome.
		e.WantRefusal(t, e.Send(Call{Key: "k1"}), codes.Unavailable, exchange.ProblemStoreUnavailable, true)
		if r := e.Must(t, Call{Key: "k1"}); r.Replayed() {
			t.Fatal("the retry was replayed")
		}
		e.WantCalls(t, 2)
	}},
	{name: "Store/RolledBackWithRelease", config: func(c *idem.Config) { c.Store = rollsBackReleases{c.Store} }, run: func(t *testing.T, e *Env) {
		// A transactional store undoes the handler's writes with a reply it
		// does not record (here, one over MaxResponseBody): an OK for work
		// undone must not reach the client.
		big := map[string]any{"amount": strings.Repeat("x", MaxResponseBody)}
		e.WantRefusal(t, e.Send(Call{Key: "k1", Req: big}), codes.Unavailable, exchange.ProblemStoreUnavailable, true)
		// A code the policy does not record reports no success: it goes
		// out as it is.
		if r := e.Send(Call{Method: Fail, Key: "k2", Req: map[string]any{"code": int(codes.Internal), "message": "m"}}); r.Code() != codes.Internal {
			t.Fatalf("a code not recorded, its work undone: %v, want the handler's own INTERNAL", r.Err)
		}
		e.WantCalls(t, 2)
	}},
	{name: "Replay/NilReply", run: func(t *testing.T, e *Env) {
		// (nil, nil) is sent by gRPC as an empty reply: so it is recorded.
		first := e.Must(t, Call{Method: Empty, Key: "k1"})
		if !proto.Equal(first.Reply, new(structpb.Struct)) {
			t.Fatalf("the first call got %v, want an empty reply", first.Reply)
		}
		WantReplay(t, first, e.Send(Call{Method: Empty, Key: "k1"}))
		e.WantCalls(t, 1)
	}},
	{name: "Replay/InvalidUTF8Message", run: func(t *testing.T, e *Env) {
		req := map[string]any{"code": int(codes.NotFound), "message": "no such card", "invalid_utf8": true}
		first := e.Send(Call{Method: Fail, Key: "k1", Req: req})
		if first.Code() != codes.NotFound || !utf8.ValidString(status.Convert(first.Err).Message()) {
			t.Fatalf("the first call got %v, want NOT_FOUND with its message made valid UTF-8", first.Err)
		}
		for range 2 {
			WantReplay(t, first, e.Send(Call{Method: Fail, Key: "k1", Req: req}))
		}
		e.WantCalls(t, 1)
	}},
	{name: "NotStored/ErrorWithCodeOK", run: func(t *testing.T, e *Env) {
		// An error whose status says OK is no reply: gRPC's client gets an
		// error for it. It is UNKNOWN, and not recorded.
		req := map[string]any{"ok_error": true}
		for i := range 2 {
			if r := e.Send(Call{Method: Fail, Key: "k1", Req: req}); r.Code() != codes.Unknown || r.Replayed() {
				t.Fatalf("call %d: %v (replayed %v), want UNKNOWN, run again", i+1, r.Err, r.Replayed())
			}
		}
		e.WantCalls(t, 2)
	}},
	{name: "Context/StoppedIsRetryable/LeaseLost", config: cutOffRenewals, run: func(t *testing.T, e *Env) {
		wantStopped(t, e, e.lease, "LEASE_LOST")
	}},
	{name: "Context/StoppedIsRetryable/HandlerTimeout", config: func(c *idem.Config) { c.HandlerTimeout = time.Minute }, run: func(t *testing.T, e *Env) {
		wantStopped(t, e, time.Minute, "HANDLER_TIMEOUT")
	}},
	{name: "PassThrough/Infrastructure", run: func(t *testing.T, e *Env) {
		// gRPC's health checks (Kubernetes' probes) need no key.
		for range 2 {
			resp, err := healthpb.NewHealthClient(e.Conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health check: %v, %v", resp, err)
			}
		}
	}},
	{name: "PassThrough/KeyNotAccepted", opts: []idemgrpc.Option{idemgrpc.WithMethods(func(m string) bool { return m == Create })},
		run: func(t *testing.T, e *Env) {
			// Held is left unguarded by the server's choice, though it may
			// have side effects: a caller that sends it a key counts on a
			// protection it would not get, so it is refused, not run.
			r := e.Send(Call{Method: Held, Key: "k1"})
			st := status.Convert(r.Err)
			if st.Code() != codes.FailedPrecondition || len(st.Details()) != 1 ||
				st.Details()[0].(*errdetails.ErrorInfo).GetReason() != "KEY_NOT_ACCEPTED" {
				t.Fatalf("a key sent to a method the server does not guard: %v, want FAILED_PRECONDITION KEY_NOT_ACCEPTED", r.Err)
			}
			e.WantCalls(t, 0)
			e.Must(t, Call{Method: Held, NoKey: true})
			// A method whose proto says a repetition is harmless ignores it.
			e.Must(t, Call{Method: Get, Key: "k1"})
			e.WantCalls(t, 2)
		}},
	{name: "Key/GRPCWords", run: func(t *testing.T, e *Env) {
		// The key's refusals speak of metadata, not of HTTP header lines.
		for _, keys := range [][]string{{"k1", "k2"}, {""}} {
			r := e.Send(Call{Keys: keys})
			e.WantRefusal(t, r, codes.InvalidArgument, exchange.ProblemKeyInvalid, false)
			msg := status.Convert(r.Err).Message()
			if strings.Contains(msg, "Idempotency-Key") || strings.Contains(msg, "field") || !strings.Contains(msg, idemgrpc.KeyMetadata+" metadata") {
				t.Fatalf("%q: %q, want it in gRPC's words", keys, msg)
			}
		}
	}},
	{name: "Key/FromRequest", opts: []idemgrpc.Option{idemgrpc.WithKey(func(_ context.Context, req any) (string, bool) {
		v, ok := req.(*structpb.Struct).GetFields()["request_id"]
		return v.GetStringValue(), ok
	})}, run: func(t *testing.T, e *Env) {
		r := e.Send(Call{Key: "k1"}) // a metadata key is not where this server looks
		e.WantRefusal(t, r, codes.InvalidArgument, exchange.ProblemKeyMissing, false)
		if msg := status.Convert(r.Err).Message(); strings.Contains(msg, "metadata") || !strings.Contains(msg, "request") {
			t.Fatalf("missing key: %q, want it to say the key comes from the request", msg)
		}
		r = e.Send(Call{Req: map[string]any{"request_id": ""}})
		e.WantRefusal(t, r, codes.InvalidArgument, exchange.ProblemKeyInvalid, false)
		if msg := status.Convert(r.Err).Message(); strings.Contains(msg, "metadata") || strings.Contains(msg, "Idempotency-Key") {
			t.Fatalf("empty key: %q, want no words of metadata or headers", msg)
		}
		first := e.Must(t, Call{NoKey: true, Req: map[string]any{"request_id": "r-1"}})
		WantReplay(t, first, e.Send(Call{NoKey: true, Req: map[string]any{"request_id": "r-1"}}))
		e.WantCalls(t, 1)
	}},
	{name: "Fingerprint/UnknownFieldsInAnyOrder", run: func(t *testing.T, e *Env) {
		// A client one schema version ahead sends a map field this server
		// does not know, its entries in any order: a retry is the same call.
		entries := unknownMap(99, 12)
		first := e.Must(t, Call{Key: "k1", Unknown: bytes.Join(entries, nil)})
		for i := range 5 {
			shuffled := slices.Clone(entries)
			rand.New(rand.NewPCG(uint64(i), 7)).Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
			slices.Reverse(shuffled[:i+1])
			WantReplay(t, first, e.Send(Call{Key: "k1", Unknown: bytes.Join(shuffled, nil)}))
		}
		// Unknown fields count: another value is another call.
		other := slices.Clone(entries)
		other[0] = unknownMap(99, 13)[12]
		e.WantRefusal(t, e.Send(Call{Key: "k1", Unknown: bytes.Join(other, nil)}), codes.FailedPrecondition, exchange.ProblemKeyReused, false)
		e.WantRefusal(t, e.Send(Call{Key: "k1"}), codes.FailedPrecondition, exchange.ProblemKeyReused, false)
		e.WantCalls(t, 1)
	}},
	{name: "Fingerprint/AnyPackedAnew", run: func(t *testing.T, e *Env) {
		// anypb.New encodes its message as the sender's encoder does, a
		// map's entries in any order: an equal message packed anew is the
		// same call.
		pack := func(amount float64) *anypb.Any {
			fields := map[string]any{"amount": amount}
			for i := range 16 {
				fields[fmt.Sprintf("meta_%02d", i)] = fmt.Sprint(i)
			}
			a, err := anypb.New(Request(fields))
			if err != nil {
				t.Fatal(err)
			}
			return a
		}
		first := e.Must(t, Call{Method: Pack, Key: "k1", Msg: pack(1999)})
		for range 8 {
			WantReplay(t, first, e.Send(Call{Method: Pack, Key: "k1", Msg: pack(1999)}))
		}
		e.WantRefusal(t, e.Send(Call{Method: Pack, Key: "k1", Msg: pack(2000)}), codes.FailedPrecondition, exchange.ProblemKeyReused, false)
		e.WantCalls(t, 1)
	}},
	{name: "Store/FailOpen", config: func(c *idem.Config) { StoreUnreachable(c); c.FailOpen = true }, run: func(t *testing.T, e *Env) {
		e.Must(t, Call{Key: "k1"})
		e.Must(t, Call{Key: "k1"})
		e.WantCalls(t, 2)
	}},
}

// watch opens a Watch stream with key and counts its messages.
func watch(t *testing.T, e *Env, key string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.KeyMetadata, key)
	stream, err := e.Conn.NewStream(ctx, &watchDesc, Watch)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(Request(nil)); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		if err := stream.RecvMsg(new(structpb.Struct)); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			return n
		}
		n++
	}
}

// cutOffRenewals makes every renewal fail, as for an instance cut off from
// its store.
func cutOffRenewals(c *idem.Config) { c.Store = failingRenewals{c.Store} }

var errUnreachable = errors.New("grpcsuite: store unreachable")

// failingRenewals fails Renew (and hides any batch renewal of the store
// it wraps, so the Engine calls Renew).
type failingRenewals struct{ idem.Store }

func (failingRenewals) Renew(context.Context, idem.ID, string, time.Time) error {
	return errUnreachable
}

// StoreUnreachable makes the Engine's store unreachable: Acquire, the
// first call of every guarded call, fails.
func StoreUnreachable(c *idem.Config) { c.Store = unreachable{c.Store} }

// StoreFull makes the Engine's store refuse every new key as full.
func StoreFull(c *idem.Config) { c.Store = fullStore{c.Store} }

type unreachable struct{ idem.Store }

func (unreachable) Acquire(context.Context, idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	return idem.Record{}, 0, errUnreachable
}

// fullStore is a bounded store with no room left.
type fullStore struct{ idem.Store }

func (fullStore) Acquire(context.Context, idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	return idem.Record{}, 0, idem.ErrStoreFull
}

// wantStopped runs a handler that answers with its context's error, as
// most do, moves the clock by advance so that the Engine stops it, and
// checks the answer: gRPC would say CANCELLED to a caller that cancelled
// nothing, which no client retries; it must be UNAVAILABLE with a
// RetryInfo, the retry trailer and an ErrorInfo saying why (reason).
func wantStopped(t *testing.T, e *Env, advance time.Duration, reason string) {
	t.Helper()
	done := make(chan *Result, 1)
	go func() { done <- e.Send(Call{Method: Wait, Key: "k1", Req: map[string]any{"return": "ctx"}}) }()
	e.WaitEntered(t)
	e.Clock.Advance(advance)
	r := recv(t, done, "answer of the handler")
	st := status.Convert(r.Err)
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
	if st.Code() != codes.Unavailable || info.GetReason() != reason || info.GetDomain() != idemgrpc.ErrorDomain ||
		delay.GetRetryDelay().AsDuration() != e.retryAfter || len(r.Trailer.Get("grpc-retry-pushback-ms")) != 1 {
		t.Fatalf("a handler stopped for %s answered %v (details %v, trailer %v), want UNAVAILABLE with RetryInfo and its reason",
			reason, r.Err, st.Details(), r.Trailer)
	}
}

// unknownMap returns n entries of a map<string, string> field num, each
// encoded as a client encodes it, for a server that does not know the field.
func unknownMap(num protowire.Number, n int) [][]byte {
	entries := make([][]byte, n)
	for i := range entries {
		var entry []byte
		entry = protowire.AppendTag(entry, 1, protowire.BytesType)
		entry = protowire.AppendString(entry, fmt.Sprintf("key-%02d", i))
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendString(entry, fmt.Sprintf("value-%02d", i))
		entries[i] = protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), entry)
	}
	return entries
}

// losesLockOnce forgets the record of its first Complete before it lands,
// as an operator's forced forget does.
type losesLockOnce struct {
	idem.Store
	lost atomic.Bool
}

func (s *losesLockOnce) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	if s.lost.CompareAndSwap(false, true) {
		if err := s.Store.Release(ctx, id, token); err != nil {
			return err
		}
		return idem.ErrLockLost
	}
	return s.Store.Complete(ctx, id, token, c)
}

// rollsBackReleases releases as a transactional store does when the
// handler wrote through its transaction: the writes are undone, and
// Release says so.
type rollsBackReleases struct{ idem.Store }

func (s rollsBackReleases) Release(ctx context.Context, id idem.ID, token string) error {
	if err := s.Store.Release(ctx, id, token); err != nil {
		return err
	}
	return fmt.Errorf("grpcsuite: the handler's transaction was rolled back: %w", idem.ErrRolledBack)
}

// rollsBackOnce fails its first Complete as a transactional store does
// when its commit fails: the handler's writes are gone with it.
type rollsBackOnce struct {
	idem.Store
	failed atomic.Bool
}

func (s *rollsBackOnce) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	if s.failed.CompareAndSwap(false, true) {
		return fmt.Errorf("grpcsuite: commit failed: %w", idem.ErrRolledBack)
	}
	return s.Store.Complete(ctx, id, token, c)
}
