package storetests

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

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

// Defect: a handler that wrote its charge through gormstore.Tx and
// answered a reply over MaxResponseBody got OK, its charge rolled back
// with the key's release: its client took the charge as made, while the
// retry charged again. A reply whose writes were undone is withheld now:
// UNAVAILABLE, and nothing was charged.
func TestTxReplyTooLargeWithheld(t *testing.T) {
	for _, b := range []struct {
		name string
		open func(testing.TB) *gorm.DB
	}{
		{"sqlite", func(tb testing.TB) *gorm.DB { return openSQLite(tb, filepath.Join(tb.TempDir(), "idem.db")) }},
		{"postgres", postgresPool},
	} {
		t.Run(b.name, func(t *testing.T) {
			db := b.open(t)
			table := "charges_" + randomHex(6)
			if err := db.Exec(`CREATE TABLE ` + table + ` (idem_key TEXT NOT NULL, amount INTEGER NOT NULL)`).Error; err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Exec("DROP TABLE IF EXISTS " + table) })
			store := gormStore(t, db, gormstore.WithTable("idem_"+randomHex(6)))
			engine := idem.New(idem.Config{Store: store, MaxResponseBody: 4096, Logger: slog.New(slog.DiscardHandler)})
			srv := grpc.NewServer(grpc.ChainUnaryInterceptor(txSlot,
				idemgrpc.UnaryServerInterceptor(engine, idemgrpc.WithReplyTypes(map[string]proto.Message{createCharge: &structpb.Struct{}}))))
			var runs atomic.Int64
			srv.RegisterService(grpcsuite.ServiceDesc("payments.Charges", map[string]grpcsuite.Method{
				"Create": func(ctx context.Context, req *structpb.Struct) (any, error) {
					runs.Add(1)
					tx, err := gormstore.Tx(ctx, db)
					if err != nil {
						return nil, status.Error(codes.Internal, err.Error())
					}
					if err := tx.Exec(`INSERT INTO ` + table + ` (idem_key, amount) VALUES ('k', 1999)`).Error; err != nil {
						return nil, status.Error(codes.Internal, err.Error())
					}
					return &structpb.Struct{Fields: map[string]*structpb.Value{
						"receipt": structpb.NewStringValue(strings.Repeat("r", 8192)),
					}}, nil
				},
			}), nil)
			lis := grpcsuite.Listen(t)
			go func() { _ = srv.Serve(lis) }()
			t.Cleanup(srv.Stop)
			conn := grpcsuite.Dial(t, lis.Addr().String())
			for i := range 2 {
				r := grpcsuite.Send(conn, grpcsuite.Call{Method: createCharge, Key: "k1"})
				if r.Code() != codes.Unavailable {
					t.Fatalf("call %d: %v, want UNAVAILABLE: the reply's charge was rolled back", i+1, r.Err)
				}
			}
			var n int64
			if err := db.Raw(`SELECT COUNT(*) FROM ` + table).Scan(&n).Error; err != nil {
				t.Fatal(err)
			}
			if n != 0 || runs.Load() != 2 {
				t.Fatalf("%d charges after %d runs, want none", n, runs.Load())
			}
		})
	}
}
