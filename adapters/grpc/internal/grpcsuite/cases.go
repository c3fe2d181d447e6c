package grpcsuite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idemgrpc "github.com/idemkit/idemkit/adapters/grpc"
	idem "github.com/idemkit/idemkit/core"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// The codes a handler's status is recorded with, and those it is not.
var (
	recordedCodes = []codes.Code{codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unimplemented, codes.DataLoss, codes.Unauthenticated}
	notRecordedCodes = []codes.Code{codes.Canceled, codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted,
		codes.Aborted, codes.Internal, codes.Unavailable}
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
		e.WantRefusal(t, e.Send(Call{Key: "k1", Req: map[string]any{"amount": 2000}}), codes.FailedPrecondition, idem.ProblemKeyReused, false)
		e.WantRefusal(t, e.Send(Call{Key: "k1", Req: map[string]any{}}), codes.FailedPrecondition, idem.ProblemKeyReused, false)
		WantReplay(t, first, e.Send(Call{Key: "k1"}))
		e.WantCalls(t, 1)
	}},
	{name: "Mismatch/Method", run: func(t *testing.T, e *Env) {
		first := e.Must(t, Call{Key: "k1"})
		e.WantRefusal(t, e.Send(Call{Method: Held, Key: "k1"}), codes.FailedPrecondition, idem.ProblemKeyReused, false)
		WantReplay(t, first, e.Send(Call{Key: "k1"}))
		e.WantCalls(t, 1)
	}},
	{name: "Conflict/InFlight", run: func(t *testing.T, e *Env) {
		done := make(chan *Result, 1)
		go func() { done <- e.Send(Call{Method: Slow, Key: "k1"}) }()
		e.WaitEntered(t)
		e.WantRefusal(t, e.Send(Call{Method: Slow, Key: "k1"}), codes.Aborted, idem.ProblemInProgress, true)
		// Another request message is a mismatch, even while the first runs.
		e.WantRefusal(t, e.Send(Call{Method: Slow, Key: "k1", Req: map[string]any{"amount": 2}}),
			codes.FailedPrecondition, idem.ProblemKeyReused, false)
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
		e.WantRefusal(t, e.Send(Call{NoKey: true}), codes.InvalidArgument, idem.ProblemKeyMissing, false)
		e.WantCalls(t, 0)
	}},
	{name: "Key/Invalid", run: func(t *testing.T, e *Env) {
		for _, keys := range [][]string{{`"unterminated`}, {"k1", "k2"}, {"k1", "k1"}, {"a, b"}, {""}, {strings.Repeat("k", 256)}} {
			r := e.Send(Call{Keys: keys})
			e.WantRefusal(t, r, codes.InvalidArgument, idem.ProblemKeyInvalid, false)
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
		if old.Err != nil || taken.Err != nil {
			t.Fatalf("answers %v and %v", old.Err, taken.Err)
		}
		// Whatever order they finished in, the recorded reply is the new holder's.
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
		e.WantRefusal(t, e.Send(Call{Key: "k1", Req: big}), codes.ResourceExhausted, idem.ProblemPayloadTooLarge, false)
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
		e.WantRefusal(t, e.Send(Call{Key: "k1"}), codes.Unavailable, idem.ProblemStoreUnavailable, true)
		e.WantCalls(t, 0)
	}},
	{name: "Store/Full", config: StoreFull, run: func(t *testing.T, e *Env) {
		e.WantRefusal(t, e.Send(Call{Key: "k1"}), codes.ResourceExhausted, idem.ProblemStoreFull, true)
		e.WantCalls(t, 0)
	}},
	{name: "Store/RolledBackNotDelivered", config: func(c *idem.Config) { c.Store = &rollsBackOnce{Store: c.Store} }, run: func(t *testing.T, e *Env) {
		// The handler's work was undone with the failed completion: its
		// reply must not reach the client, whose retry runs it again.
		e.WantRefusal(t, e.Send(Call{Key: "k1"}), codes.Unavailable, idem.ProblemStoreUnavailable, true)
		second := e.Must(t, Call{Key: "k1"})
		if second.Replayed() {
			t.Fatal("the retry after a rolled-back completion was replayed")
		}
		WantReplay(t, second, e.Send(Call{Key: "k1"}))
		e.WantCalls(t, 2)
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
