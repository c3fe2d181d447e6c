package idemgrpc_test

import (
	"context"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	idemgrpc "github.com/idemkit/idemkit/adapters/grpc"
	"github.com/idemkit/idemkit/adapters/grpc/internal/grpcsuite"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemevent"
	"github.com/idemkit/idemkit/core/idemtest"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// clientEnv is a server on loopback whose every call's key is noted, as it
// arrived, before idemkit sees it, and a client with the interceptor.
type clientEnv struct {
	app   *grpcsuite.App
	conn  *grpc.ClientConn
	keys  *keyLog
	waits []time.Duration
}

type keyLog struct {
	mu   sync.Mutex
	keys []string
	// onCall, if set, runs before the n-th call (from 1) goes on to idemkit.
	onCall func(n int)
}

func (l *keyLog) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	l.mu.Lock()
	l.keys = append(l.keys, metadata.ValueFromIncomingContext(ctx, idemgrpc.KeyMetadata)...)
	n, onCall := len(l.keys), l.onCall
	l.mu.Unlock()
	if onCall != nil {
		onCall(n)
	}
	return handler(ctx, req)
}

func (l *keyLog) setOnCall(f func(n int)) {
	l.mu.Lock()
	l.onCall = f
	l.mu.Unlock()
}

func (l *keyLog) seen() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.keys)
}

// newClientEnv serves the test services with an Engine on the memory store
// (configure applied to its Config), and dials them through the client
// interceptor for cfg, whose Sleep only notes the waits and calls sleep,
// if set. dial adds dial options.
func newClientEnv(t *testing.T, configure func(*idem.Config), cfg idemgrpc.ClientConfig, sleep func(time.Duration), dial ...grpc.DialOption) *clientEnv {
	t.Helper()
	return newClientEnvFor(t, nil, configure, cfg, sleep, dial...)
}

// newClientEnvFor is newClientEnv with the server interceptor's options.
func newClientEnvFor(t *testing.T, server []idemgrpc.Option, configure func(*idem.Config), cfg idemgrpc.ClientConfig, sleep func(time.Duration), dial ...grpc.DialOption) *clientEnv {
	t.Helper()
	c := &clientEnv{app: grpcsuite.NewApp(), keys: &keyLog{}}
	ecfg := idem.Config{Store: memStore(t)}
	if configure != nil {
		configure(&ecfg)
	}
	lis := grpcsuite.Listen(t)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(c.keys.intercept, grpcsuite.Recover,
		idemgrpc.UnaryServerInterceptor(idem.New(ecfg), server...)))
	grpcsuite.Register(srv, c.app)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	t.Cleanup(c.app.ReleaseSlow)
	var mu sync.Mutex
	cfg.Sleep = func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		c.waits = append(c.waits, d)
		mu.Unlock()
		if sleep != nil {
			sleep(d)
		}
		return ctx.Err()
	}
	dial = append(dial, grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(cfg)))
	c.conn = grpcsuite.Dial(t, lis.Addr().String(), dial...)
	return c
}

// call makes a call through the interceptor, with md as its outgoing
// metadata, bounded by a deadline of 10 s.
func (c *clientEnv) call(ctx context.Context, method string, req map[string]any, md ...string) *grpcsuite.Result {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.invoke(metadata.AppendToOutgoingContext(ctx, md...), method, req)
}

// invoke makes a call through the interceptor with ctx as it is, and the
// call options opts.
func (c *clientEnv) invoke(ctx context.Context, method string, req map[string]any, opts ...grpc.CallOption) *grpcsuite.Result {
	r := &grpcsuite.Result{Reply: grpcsuite.NewReply(method)}
	r.Err = c.conn.Invoke(ctx, method, grpcsuite.Request(req), r.Reply, append(opts, grpc.Header(&r.Header))...)
	return r
}

// deadlineContext is a context whose deadline passes when the test says
// so: once pass is called it is done, with context.DeadlineExceeded, as
// a context whose deadline has passed is. Its children learn it as they
// learn of any context of another package's type, a moment later.
type deadlineContext struct {
	done chan struct{}
	once sync.Once
}

func newDeadlineContext() *deadlineContext { return &deadlineContext{done: make(chan struct{})} }

func (c *deadlineContext) pass() { c.once.Do(func() { close(c.done) }) }

func (c *deadlineContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *deadlineContext) Done() <-chan struct{}       { return c.done }
func (c *deadlineContext) Value(any) any               { return nil }
func (c *deadlineContext) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// waitingContext is a context that can be cancelled and says, on waiting,
// when something first waits on it.
type waitingContext struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func (c *waitingContext) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

// TestClientDefaultSleepEndsWithTheCallersContext: the default wait
// (idemclient.Sleep, a real timer) ends when the caller cancels, and the
// call returns CANCELLED at once, not after the hour it was to wait.
func TestClientDefaultSleepEndsWithTheCallersContext(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	ctx := &waitingContext{Context: parent, waiting: make(chan struct{})}
	intercept := idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{
		BaseBackoff: time.Hour, MaxBackoff: time.Hour, Random: func() float64 { return 1 }})
	attempts := 0
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		attempts++
		return status.Error(codes.Unavailable, "down")
	}
	go func() {
		<-ctx.waiting // the interceptor's wait has begun
		cancel()
	}()
	err := intercept(ctx, "/test.Charges/Charge", nil, nil, nil, invoker)
	if status.Code(err) != codes.Canceled || attempts != 1 {
		t.Fatalf("%v after %d attempts, want CANCELLED after one: the caller cancelled during the wait", err, attempts)
	}
}

// errorReason returns the reason of the ErrorInfo detail of err's status,
// or "".
func errorReason(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

var uuidKey = regexp.MustCompile(`^"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$`)

func TestClientAddsAKeyPerCall(t *testing.T) {
	c := newClientEnv(t, nil, idemgrpc.ClientConfig{}, nil)
	for range 2 {
		if r := c.call(context.Background(), grpcsuite.Create, nil); r.Err != nil || r.Replayed() {
			t.Fatalf("%v (replayed %v)", r.Err, r.Replayed())
		}
	}
	keys := c.keys.seen()
	if len(keys) != 2 || !uuidKey.MatchString(keys[0]) || !uuidKey.MatchString(keys[1]) || keys[0] == keys[1] {
		t.Fatalf("the server saw the keys %q, want a fresh random UUID per call", keys)
	}
	// A call the server does not guard gets none.
	if r := c.call(context.Background(), grpcsuite.Get, nil); r.Err != nil {
		t.Fatal(r.Err)
	}
	if keys := c.keys.seen(); len(keys) != 2 {
		t.Fatalf("a call to a method with no side effects got a key: %q", keys[2:])
	}
}

func TestClientKeepsTheCallersKey(t *testing.T) {
	c := newClientEnv(t, nil, idemgrpc.ClientConfig{}, nil)
	first := c.call(context.Background(), grpcsuite.Create, nil, idemgrpc.KeyMetadata, "order-1")
	again := c.call(context.Background(), grpcsuite.Create, nil, idemgrpc.KeyMetadata, "order-1")
	grpcsuite.WantReplay(t, first, again)
	if keys := c.keys.seen(); !slices.Equal(keys, []string{"order-1", "order-1"}) {
		t.Fatalf("the server saw the keys %q", keys)
	}
}

// TestClientRetriesAsAsked: a call meets its key still running; the
// interceptor waits the RetryInfo delay and retries with the same key,
// which gets the first call's reply.
func TestClientRetriesAsAsked(t *testing.T) {
	first := make(chan *grpcsuite.Result, 1)
	var c *clientEnv
	// Sleep runs in the goroutine making the call, after c is set.
	c = newClientEnv(t, func(cfg *idem.Config) { cfg.RetryAfter = 2 * time.Second }, idemgrpc.ClientConfig{}, func(time.Duration) {
		c.app.ReleaseSlow()
		<-first // the retry comes once the first call is recorded
	})
	go func() {
		first <- c.call(context.Background(), grpcsuite.Slow, nil, idemgrpc.KeyMetadata, "k1")
	}()
	grpcsuite.WaitEntered(t, c.app)
	r := c.call(context.Background(), grpcsuite.Slow, nil, idemgrpc.KeyMetadata, "k1")
	if r.Err != nil || !r.Replayed() {
		t.Fatalf("%v (replayed %v), want the first call's reply", r.Err, r.Replayed())
	}
	if !slices.Equal(c.waits, []time.Duration{2 * time.Second}) {
		t.Fatalf("waits %v, want the 2 s the server asked for", c.waits)
	}
	if keys := c.keys.seen(); !slices.Equal(keys, []string{"k1", "k1", "k1"}) {
		t.Fatalf("the server saw the keys %q", keys)
	}
	if calls := c.app.Calls(); calls != 1 {
		t.Fatalf("the handler ran %d times", calls)
	}
}

// TestClientBacksOff: a handler that keeps answering UNAVAILABLE (not
// recorded, so each attempt runs it) is tried MaxAttempts times with the
// same key, waiting a jittered, doubling backoff between attempts.
func TestClientBacksOff(t *testing.T) {
	cfg := idemgrpc.ClientConfig{MaxAttempts: 4, BaseBackoff: 100 * time.Millisecond, MaxBackoff: 250 * time.Millisecond,
		Random: func() float64 { return 0.5 }}
	c := newClientEnv(t, nil, cfg, nil)
	r := c.call(context.Background(), grpcsuite.Fail, map[string]any{"code": int(codes.Unavailable)})
	if r.Code() != codes.Unavailable {
		t.Fatalf("%v, want the last attempt's UNAVAILABLE", r.Err)
	}
	if want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 125 * time.Millisecond}; !slices.Equal(c.waits, want) {
		t.Fatalf("waits %v, want %v", c.waits, want)
	}
	keys := c.keys.seen()
	if len(keys) != 4 || keys[0] != keys[3] || !uuidKey.MatchString(keys[0]) || c.app.Calls() != 4 {
		t.Fatalf("the server saw the keys %q and ran %d calls", keys, c.app.Calls())
	}
}

func TestClientDoesNotRetry(t *testing.T) {
	for _, tc := range []struct {
		name      string
		configure func(*idem.Config)
		cfg       idemgrpc.ClientConfig
		ctx       func() (context.Context, context.CancelFunc)
		method    string
		req       map[string]any
		code      codes.Code
	}{
		{name: "InvalidArgument", method: grpcsuite.Fail, req: map[string]any{"code": int(codes.InvalidArgument)}, code: codes.InvalidArgument},
		{name: "ResourceExhaustedWithoutRetryInfo", method: grpcsuite.Fail,
			req: map[string]any{"code": int(codes.ResourceExhausted)}, code: codes.ResourceExhausted},
		{name: "MessageTooLarge", configure: func(c *idem.Config) { c.MaxRequestBody = 10 },
			method: grpcsuite.Create, code: codes.ResourceExhausted},
		{name: "CodeNotListed", cfg: idemgrpc.ClientConfig{RetryCodes: []codes.Code{codes.Aborted}},
			method: grpcsuite.Fail, req: map[string]any{"code": int(codes.Unavailable)}, code: codes.Unavailable},
		{name: "OneAttempt", cfg: idemgrpc.ClientConfig{MaxAttempts: 1},
			method: grpcsuite.Fail, req: map[string]any{"code": int(codes.Unavailable)}, code: codes.Unavailable},
		{name: "RetryInfoOverMaxBackoff", configure: func(c *idem.Config) { grpcsuite.StoreUnreachable(c); c.RetryAfter = 10 * time.Second },
			method: grpcsuite.Create, code: codes.Unavailable},
		{name: "WaitPastDeadline", configure: func(c *idem.Config) { grpcsuite.StoreUnreachable(c); c.RetryAfter = 3 * time.Second },
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 2*time.Second)
			},
			method: grpcsuite.Create, code: codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClientEnv(t, tc.configure, tc.cfg, nil)
			ctx, cancel := context.Background(), func() {}
			if tc.ctx != nil {
				ctx, cancel = tc.ctx()
			}
			defer cancel()
			if r := c.call(ctx, tc.method, tc.req); r.Code() != tc.code {
				t.Fatalf("%v, want %v", r.Err, tc.code)
			}
			if len(c.waits) != 0 || len(c.keys.seen()) != 1 {
				t.Fatalf("waited %v and sent %d attempts, want one attempt", c.waits, len(c.keys.seen()))
			}
		})
	}
}

// TestClientRetriesStoreFull: RESOURCE_EXHAUSTED with RetryInfo (a full
// store) is retried after the delay it asks for.
func TestClientRetriesStoreFull(t *testing.T) {
	c := newClientEnv(t, grpcsuite.StoreFull, idemgrpc.ClientConfig{MaxAttempts: 2}, nil)
	if r := c.call(context.Background(), grpcsuite.Create, nil); r.Code() != codes.ResourceExhausted {
		t.Fatalf("%v, want the store full", r.Err)
	}
	if keys := c.keys.seen(); !slices.Equal(c.waits, []time.Duration{time.Second}) || len(keys) != 2 || keys[0] != keys[1] {
		t.Fatalf("waits %v, keys %q: want one retry after 1 s with the same key", c.waits, keys)
	}
}

// TestClientWithGRPCRetryPolicy: the interceptor only adds the key
// (MaxAttempts 1), and gRPC's own retry policy, from the service config,
// retries: every attempt carries the key, and gRPC waits as the server's
// grpc-retry-pushback-ms trailer asks.
func TestClientWithGRPCRetryPolicy(t *testing.T) {
	const serviceConfig = `{"methodConfig": [{
		"name": [{"service": "idemkit.grpcsuite.Charges"}],
		"retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.01s", "maxBackoff": "0.05s",
			"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "ABORTED"]}}]}`
	t.Run("Unavailable", func(t *testing.T) {
		c := newClientEnv(t, nil, idemgrpc.ClientConfig{MaxAttempts: 1}, nil, grpc.WithDefaultServiceConfig(serviceConfig))
		if r := c.call(context.Background(), grpcsuite.Fail, map[string]any{"code": int(codes.Unavailable)}); r.Code() != codes.Unavailable {
			t.Fatalf("%v, want UNAVAILABLE after gRPC's retries", r.Err)
		}
		keys := c.keys.seen()
		if len(keys) != 4 || keys[0] != keys[1] || keys[0] != keys[3] || !uuidKey.MatchString(keys[0]) {
			t.Fatalf("gRPC's 4 attempts carried the keys %q, want one key", keys)
		}
	})
	t.Run("InProgress", func(t *testing.T) {
		c := newClientEnv(t, func(cfg *idem.Config) { cfg.RetryAfter = 50 * time.Millisecond },
			idemgrpc.ClientConfig{MaxAttempts: 1}, nil, grpc.WithDefaultServiceConfig(serviceConfig))
		done, seen := make(chan *grpcsuite.Result, 1), make(chan *grpcsuite.Result, 1)
		app := c.app
		c.keys.setOnCall(func(n int) {
			if n == 3 { // the first call, the retry's first attempt (refused), then gRPC's retry of it
				app.ReleaseSlow()
				seen <- <-done
			}
		})
		go func() { done <- c.call(context.Background(), grpcsuite.Slow, nil, idemgrpc.KeyMetadata, "k1") }()
		grpcsuite.WaitEntered(t, c.app)
		r := c.call(context.Background(), grpcsuite.Slow, nil, idemgrpc.KeyMetadata, "k1")
		select {
		case first := <-seen:
			grpcsuite.WantReplay(t, first, r)
		default:
			t.Fatalf("gRPC did not retry the call refused as in progress: %v", r.Err)
		}
		if keys := c.keys.seen(); !slices.Equal(keys, []string{"k1", "k1", "k1"}) {
			t.Fatalf("the server saw the keys %q", keys)
		}
		if calls := c.app.Calls(); calls != 1 {
			t.Fatalf("the handler ran %d times", calls)
		}
	})
}

// TestClientEndsWithTheCallersContext: a caller whose context ends while
// the interceptor waits to retry gets its context's end as the call's
// status, CANCELLED or DEADLINE_EXCEEDED, not the status of the attempt
// before, and no further attempt is made.
func TestClientEndsWithTheCallersContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, func())
		code codes.Code
	}{
		{name: "Cancelled", code: codes.Canceled, ctx: func() (context.Context, func()) {
			return context.WithCancel(context.Background())
		}},
		{name: "DeadlinePassed", code: codes.DeadlineExceeded, ctx: func() (context.Context, func()) {
			ctx := newDeadlineContext()
			return ctx, ctx.pass
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, end := tc.ctx()
			defer end()
			c := newClientEnv(t, nil, idemgrpc.ClientConfig{}, func(time.Duration) { end() })
			r := c.invoke(ctx, grpcsuite.Fail, map[string]any{"code": int(codes.Unavailable)})
			if r.Code() != tc.code {
				t.Fatalf("%v, want %v: the caller's context ended during the backoff wait", r.Err, tc.code)
			}
			if len(c.waits) != 1 || len(c.keys.seen()) != 1 || c.app.Calls() != 1 {
				t.Fatalf("waited %v, sent %d attempts, ran %d: want one attempt and the wait it ended",
					c.waits, len(c.keys.seen()), c.app.Calls())
			}
		})
	}
}

// TestClientKeyNotAccepted: the server guards only Create; a client with
// its defaults sends a key with a call to Fail (a refund, say, whose proto
// declares nothing, so the client counts on a guard), which answers
// UNAVAILABLE when it runs. The server refuses the key rather than run the
// call unguarded, the client does not retry the refusal, and its caller
// gets it: the call never runs, where it ran once per attempt, the
// client's retries included.
func TestClientKeyNotAccepted(t *testing.T) {
	onlyCreate := idemgrpc.WithMethods(func(m string) bool { return m == grpcsuite.Create })
	c := newClientEnvFor(t, []idemgrpc.Option{onlyCreate}, nil, idemgrpc.ClientConfig{}, nil)
	r := c.call(context.Background(), grpcsuite.Fail, map[string]any{"code": int(codes.Unavailable)})
	if r.Code() != codes.FailedPrecondition || errorReason(r.Err) != "KEY_NOT_ACCEPTED" {
		t.Fatalf("%v, want FAILED_PRECONDITION KEY_NOT_ACCEPTED", r.Err)
	}
	if calls := c.app.Calls(); calls != 0 || len(c.waits) != 0 || len(c.keys.seen()) != 1 {
		t.Fatalf("the method ran %d times, in %d attempts, after the waits %v: want one attempt, refused",
			calls, len(c.keys.seen()), c.waits)
	}
}

// TestClientCallerRetriesWithTheKeyUsed: a call's deadline passes while its
// handler runs (DEADLINE_EXCEEDED, which the interceptor does not retry).
// Its caller learnt the key the interceptor made for it (KeyUsed) and
// retries with it (WithOutgoingKey): the handler, which went on and
// finished, ran once, and the retry gets its reply, replayed.
func TestClientCallerRetriesWithTheKeyUsed(t *testing.T) {
	outcomes, events := idemtest.Outcomes()
	c := newClientEnv(t, outcomes, idemgrpc.ClientConfig{}, nil)
	ctx := newDeadlineContext()
	var key string
	done := make(chan *grpcsuite.Result, 1)
	go func() { done <- c.invoke(ctx, grpcsuite.Slow, nil, idemgrpc.KeyUsed(&key)) }()
	grpcsuite.WaitEntered(t, c.app)
	ctx.pass()
	if r := <-done; r.Code() != codes.DeadlineExceeded {
		t.Fatalf("%v, want DEADLINE_EXCEEDED", r.Err)
	}
	if !uuidKey.MatchString(key) {
		t.Fatalf("KeyUsed gave %q, want the key the interceptor made", key)
	}
	c.app.ReleaseSlow()
	idemtest.WantOutcome(t, events, idemevent.Stored, "")

	var again string
	retry, cancel := context.WithTimeout(idemgrpc.WithOutgoingKey(context.Background(), key), 10*time.Second)
	defer cancel()
	r := c.invoke(retry, grpcsuite.Slow, nil, idemgrpc.KeyUsed(&again))
	if r.Err != nil || !r.Replayed() {
		t.Fatalf("%v (replayed %v), want the first call's reply, replayed", r.Err, r.Replayed())
	}
	if id := r.Reply.(*structpb.Struct).GetFields()["id"].GetStringValue(); id != "ch_1" {
		t.Fatalf("the retry got %q, want ch_1", id)
	}
	if keys := c.keys.seen(); again != key || !slices.Equal(keys, []string{key, key}) {
		t.Fatalf("the server saw the keys %q; KeyUsed gave %q, then %q", keys, key, again)
	}
	if calls := c.app.Calls(); calls != 1 {
		t.Fatalf("the handler ran %d times, want once", calls)
	}
}

// TestClientWithOutgoingKey: the key WithOutgoingKey puts in a context
// replaces any the context carried, and KeyUsed reports it, also for a
// call the interceptor does not guard.
func TestClientWithOutgoingKey(t *testing.T) {
	c := newClientEnv(t, nil, idemgrpc.ClientConfig{}, nil)
	ctx := metadata.AppendToOutgoingContext(context.Background(), idemgrpc.KeyMetadata, "old", "x-other", "kept")
	ctx = idemgrpc.WithOutgoingKey(idemgrpc.WithOutgoingKey(ctx, "order-7"), "order-8")
	md, _ := metadata.FromOutgoingContext(ctx)
	if !slices.Equal(md.Get(idemgrpc.KeyMetadata), []string{"order-8"}) || !slices.Equal(md.Get("x-other"), []string{"kept"}) {
		t.Fatalf("outgoing metadata %v, want the last key alone and the other entries kept", md)
	}
	var key string
	if r := c.invoke(ctx, grpcsuite.Create, nil, idemgrpc.KeyUsed(&key)); r.Err != nil || key != "order-8" {
		t.Fatalf("%v; KeyUsed gave %q, want order-8", r.Err, key)
	}
	key = "unset"
	if r := c.invoke(context.Background(), grpcsuite.Get, nil, idemgrpc.KeyUsed(&key)); r.Err != nil || key != "" {
		t.Fatalf("%v; KeyUsed gave %q for a call sent without a key", r.Err, key)
	}
}
