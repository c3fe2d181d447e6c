package storetests

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idemgrpc "github.com/idemkit/idemkit/adapters/grpc"
	"github.com/idemkit/idemkit/adapters/grpc/internal/grpcsuite"
	idem "github.com/idemkit/idemkit/core"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"gorm.io/gorm"
)

// createCharge is the full method name of the payments service's one
// method.
const createCharge = "/payments.Charges/Create"

// TestChargeRetriedAcrossRestart is the closing scenario: a client charges
// through the client interceptor; the server runs the charge, records it
// with its reply (the charge's row and the record commit in one
// transaction, on an SQLite file) and stops before it answers. A new
// server starts on the same file; the client's retry, with the same key,
// gets the recorded reply, and the charge was taken once. The retry is
// the client interceptor's own, or gRPC's, from a retryPolicy.
func TestChargeRetriedAcrossRestart(t *testing.T) {
	t.Run("InterceptorRetry", func(t *testing.T) {
		p := newPayments(t)
		var waits []time.Duration
		conn := grpcsuite.Dial(t, p.addr(), grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{
			Sleep: func(ctx context.Context, d time.Duration) error {
				waits = append(waits, d)
				p.restart(t) // the retry's wait is when the new server starts
				return ctx.Err()
			},
		})))
		reply := charge(conn)
		if len(waits) != 1 {
			t.Fatalf("the client waited %v, want one retry", waits)
		}
		p.wantTakenOnce(t, reply)
	})
	t.Run("GRPCRetryPolicy", func(t *testing.T) {
		p := newPayments(t)
		const serviceConfig = `{"methodConfig": [{"name": [{"service": "payments.Charges"}],
			"retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.05s", "maxBackoff": "0.5s",
				"backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}`
		conn := grpcsuite.Dial(t, p.addr(), grpc.WithDefaultServiceConfig(serviceConfig),
			grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{MaxAttempts: 1})))
		answer := make(chan *grpcsuite.Result, 1)
		go func() { answer <- charge(conn) }()
		// The new server may start before or after gRPC's retry connects:
		// the listener keeps the connection until a server takes it.
		p.restart(t)
		p.wantTakenOnce(t, <-answer)
	})
}

// payments is one payments service on an SQLite file, restarted once.
type payments struct {
	path    string
	lis     *keptListener
	runs    atomic.Int64 // charges run, by every instance
	crashed chan struct{}

	mu       sync.Mutex
	current  *instance
	restarts int
}

// instance is one server process: its database pool, store, Engine and
// gRPC server.
type instance struct {
	db    *gorm.DB
	store *gormstore.Store
	srv   *grpc.Server
}

func newPayments(t *testing.T) *payments {
	p := &payments{path: filepath.Join(t.TempDir(), "payments.db"), lis: keepListener(t), crashed: make(chan struct{})}
	p.current = p.start(t, true)
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.current.stop()
	})
	return p
}

func (p *payments) addr() string { return p.lis.Addr().String() }

// start starts an instance on the file. The first one crashes once it has
// recorded its first charge, before it answers.
func (p *payments) start(t *testing.T, crashes bool) *instance {
	db := openSQLite(t, p.path)
	if err := db.Exec(`CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY, idem_key TEXT NOT NULL, amount INTEGER NOT NULL)`).Error; err != nil {
		t.Fatal(err)
	}
	in := &instance{db: db, store: gormStore(t, db)}
	engine := idem.New(idem.Config{Store: in.store, Logger: slog.New(slog.DiscardHandler)})
	chain := []grpc.UnaryServerInterceptor{txSlot,
		idemgrpc.UnaryServerInterceptor(engine, idemgrpc.WithReplyTypes(map[string]proto.Message{createCharge: &structpb.Struct{}}))}
	if crashes {
		chain = append([]grpc.UnaryServerInterceptor{p.crashAfterRecording}, chain...)
	}
	in.srv = grpc.NewServer(grpc.ChainUnaryInterceptor(chain...))
	in.srv.RegisterService(grpcsuite.ServiceDesc("payments.Charges", map[string]grpcsuite.Method{
		"Create": func(ctx context.Context, req *structpb.Struct) (any, error) { return p.createCharge(ctx, db, req) },
	}), nil)
	go func() { _ = in.srv.Serve(p.lis.handle()) }()
	return in
}

func (in *instance) stop() {
	in.srv.Stop()
	_ = in.store.Close()
	closeDB(in.db)
}

// createCharge takes the charge: its row is written in the request's
// transaction, which commits with the recorded reply.
func (p *payments) createCharge(ctx context.Context, db *gorm.DB, req *structpb.Struct) (any, error) {
	p.runs.Add(1)
	tx, err := gormstore.Tx(ctx, db)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	held, _ := idem.HeldKey(ctx)
	amount := int64(req.GetFields()["amount"].GetNumberValue())
	if err := tx.Exec(`INSERT INTO charges (idem_key, amount) VALUES (?, ?)`, held.ID.Key, amount).Error; err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	var id int64
	if err := tx.Raw(`SELECT last_insert_rowid()`).Scan(&id).Error; err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		"id":     structpb.NewStringValue(fmt.Sprintf("ch_%d", id)),
		"amount": structpb.NewNumberValue(float64(amount)),
	}}, nil
}

// txSlot gives each call a transaction slot before idemkit's interceptor,
// as gormstore.TxMiddleware does for HTTP.
func txSlot(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, done := gormstore.WithTxSlot(ctx)
	defer done()
	return handler(ctx, req)
}

// crashAfterRecording lets the call run and be recorded, then stops the
// server before the reply is sent: the client sees its connection close.
func (p *payments) crashAfterRecording(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if _, err := handler(ctx, req); err != nil {
		return nil, err
	}
	p.mu.Lock()
	srv := p.current.srv
	p.mu.Unlock()
	go func() {
		srv.Stop() // closes the connection, and waits for this call to return
		close(p.crashed)
	}()
	<-ctx.Done()
	return nil, status.Error(codes.Unavailable, "the server stopped before it answered")
}

// restart waits for the crashed instance to stop, then starts a new one on
// the same file, serving the same address.
func (p *payments) restart(t *testing.T) {
	<-p.crashed
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.restarts++; p.restarts > 1 {
		return
	}
	p.current.stop()
	p.current = p.start(t, false)
}

// charge charges 1999 through conn, without a key of its own: the client
// interceptor gives it one.
func charge(conn *grpc.ClientConn) *grpcsuite.Result {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := &grpcsuite.Result{Reply: new(structpb.Struct)}
	r.Err = conn.Invoke(ctx, createCharge, grpcsuite.Request(map[string]any{"amount": 1999}), r.Reply, grpc.Header(&r.Header))
	return r
}

// wantTakenOnce checks that the client got the reply recorded before the
// restart, as a replay, and that the charge was taken once.
func (p *payments) wantTakenOnce(t *testing.T, r *grpcsuite.Result) {
	t.Helper()
	if r.Err != nil || !r.Replayed() {
		t.Fatalf("the answer after the restart is %v (error %v), not a replay", r.Reply, r.Err)
	}
	if id := r.Reply.(*structpb.Struct).GetFields()["id"].GetStringValue(); id != "ch_1" {
		t.Fatalf("the client got charge %q, want ch_1", id)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.restarts != 1 {
		t.Fatalf("%d restarts, want 1", p.restarts)
	}
	var rows []struct {
		IdemKey string
		Amount  int64
	}
	if err := p.current.db.Raw(`SELECT idem_key, amount FROM charges`).Scan(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Amount != 1999 || rows[0].IdemKey == "" || p.runs.Load() != 1 {
		t.Fatalf("charges %+v after %d runs of the handler, want one charge of 1999", rows, p.runs.Load())
	}
}

// keptListener is a loopback listener that outlives the servers serving
// it, as a service's port outlives its process behind a supervisor: a
// connection that arrives between two servers waits for the next one.
type keptListener struct {
	net.Listener
	conns chan net.Conn
	done  chan struct{}
}

func keepListener(t *testing.T) *keptListener {
	l := &keptListener{Listener: grpcsuite.Listen(t), conns: make(chan net.Conn), done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Listener.Accept()
			if err != nil {
				return
			}
			select {
			case l.conns <- c:
			case <-l.done:
				_ = c.Close()
				return
			}
		}
	})
	t.Cleanup(func() {
		close(l.done)
		_ = l.Listener.Close()
		wg.Wait()
	})
	return l
}

// handle returns the listener one server serves: closing it (as Stop
// does) leaves the port open for the next.
func (l *keptListener) handle() net.Listener {
	return &serverHandle{l: l, closed: make(chan struct{})}
}

type serverHandle struct {
	l      *keptListener
	closed chan struct{}
	once   sync.Once
}

func (h *serverHandle) Accept() (net.Conn, error) {
	select {
	case c := <-h.l.conns:
		return c, nil
	case <-h.closed:
		return nil, net.ErrClosed
	}
}

func (h *serverHandle) Close() error {
	h.once.Do(func() { close(h.closed) })
	return nil
}

func (h *serverHandle) Addr() net.Addr { return h.l.Addr() }
