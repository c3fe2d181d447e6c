package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	idemgrpc "github.com/idemkit/idemkit/adapters/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/app"
)

// grpcDemo is a demo serving gRPC on -grpc-addr beside its HTTP API.
type grpcDemo struct {
	*serving
	conn *grpc.ClientConn
}

func serveGRPC(t *testing.T, with func(*app.Config)) *grpcDemo {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.DB, cfg.ProviderLatency, cfg.GRPCAddr = filepath.Join(t.TempDir(), "p.db"), 0, "127.0.0.1:0"
	if with != nil {
		with(&cfg)
	}
	s := serve(t, cfg)
	// The client interceptor keeps a call's key for its retries, and gives
	// a call without one a key of its own.
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &grpcDemo{serving: s, conn: conn}
}

// grpcCharge is the reply and error of one payments.v1.Charges/Create.
type grpcCharge struct {
	reply    *structpb.Struct
	replayed bool
	err      error
}

func (c grpcCharge) id() string { return c.reply.GetFields()["id"].GetStringValue() }

// charge calls payments.v1.Charges/Create for account (none: no token)
// with key (none: the client interceptor's own), the charge's fields
// those of chargeBody changed by with.
func (d *grpcDemo) charge(t *testing.T, ctx context.Context, account, key string, with map[string]any) grpcCharge {
	t.Helper()
	fields := map[string]any{"amount": 1999, "currency": "usd", "customer": "cus_42", "description": "Order #1"}
	for k, v := range with {
		fields[k] = v
	}
	req, err := structpb.NewStruct(fields)
	if err != nil {
		t.Fatal(err)
	}
	if account != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+account)
	}
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.KeyMetadata, key)
	}
	var reply structpb.Struct
	var header metadata.MD
	err = d.conn.Invoke(ctx, api.ChargesCreate, req, &reply, grpc.Header(&header))
	return grpcCharge{&reply, idemgrpc.Replayed(header), err}
}

// wantCode checks a call's status code.
func wantCode(t *testing.T, c grpcCharge, code codes.Code) {
	t.Helper()
	if got := status.Code(c.err); got != code {
		t.Fatalf("code %v (%v), want %v", got, c.err, code)
	}
}

// wantMoney checks what the account was charged: its charge rows (the
// HTTP balance) and the provider's authorizations.
func (d *grpcDemo) wantMoney(t *testing.T, account string, charges int) {
	t.Helper()
	if b := d.balance(t, account); b["charges"] != float64(charges) {
		t.Fatalf("balance %v, want %d charges", b, charges)
	}
	if p := d.provider(t, account); p["authorizations"] != float64(charges) {
		t.Fatalf("provider %v, want %d authorizations", p, charges)
	}
}

// TestGRPC: with -grpc-addr, the demo takes charges over gRPC through
// idemkit's interceptor, on the Engine and database of its HTTP API: a
// call retried with its key is replayed, with the same charge and money
// taken once; a key used over HTTP is the same key over gRPC, which
// refuses it for another request; a call without a bearer token is
// refused before idemkit, recording nothing.
func TestGRPC(t *testing.T) {
	d := serveGRPC(t, nil)
	ctx := t.Context()

	t.Run("ChargedOnceThenReplayed", func(t *testing.T) {
		acct, key := newAccount(), newKey()
		first := d.charge(t, ctx, acct, key, nil)
		wantCode(t, first, codes.OK)
		f := first.reply.GetFields()
		if !strings.HasPrefix(first.id(), "ch_") || first.replayed || f["amount"].GetNumberValue() != 1999 ||
			f["status"].GetStringValue() != "succeeded" || f["object"].GetStringValue() != "charge" {
			t.Fatalf("first call: replayed %v, reply %v", first.replayed, first.reply)
		}
		again := d.charge(t, ctx, acct, key, nil)
		wantCode(t, again, codes.OK)
		if !again.replayed || again.id() != first.id() {
			t.Fatalf("retry: replayed %v, charge %s, want the replay of %s", again.replayed, again.id(), first.id())
		}
		d.wantMoney(t, acct, 1)
		// The charge is the HTTP API's.
		if r := d.do(t, http.MethodGet, "/v1/charges/"+first.id(), acct, "", ""); r.status != 200 {
			t.Fatalf("GET the gRPC charge: %d %s", r.status, r.body)
		}
	})

	t.Run("KeyOfTheClientInterceptor", func(t *testing.T) {
		acct := newAccount()
		wantCode(t, d.charge(t, ctx, acct, "", nil), codes.OK)
		wantCode(t, d.charge(t, ctx, acct, "", nil), codes.OK)
		d.wantMoney(t, acct, 2)
	})

	t.Run("KeyUsedOverHTTP", func(t *testing.T) {
		acct, key := newAccount(), newKey()
		if r := d.do(t, http.MethodPost, "/v1/charges", acct, key, chargeBody); r.status != 201 {
			t.Fatalf("HTTP charge: %d %s", r.status, r.body)
		}
		// The same charge, but another method and message: another
		// fingerprint.
		wantCode(t, d.charge(t, ctx, acct, key, nil), codes.FailedPrecondition)
		d.wantMoney(t, acct, 1)
		// Another account's key of the same name is its own.
		wantCode(t, d.charge(t, ctx, newAccount(), key, nil), codes.OK)
	})

	t.Run("Unauthenticated", func(t *testing.T) {
		key := newKey()
		wantCode(t, d.charge(t, ctx, "", key, nil), codes.Unauthenticated)
		// Nothing was recorded under the key: with a token it runs.
		acct := newAccount()
		c := d.charge(t, ctx, acct, key, nil)
		wantCode(t, c, codes.OK)
		if c.replayed {
			t.Fatal("a call refused for its token recorded its key")
		}
	})

	t.Run("Errors", func(t *testing.T) {
		acct := newAccount()
		invalid := d.charge(t, ctx, acct, newKey(), map[string]any{"amount": "a lot"})
		wantCode(t, invalid, codes.InvalidArgument)
		if !strings.Contains(status.Convert(invalid.err).Message(), "amount must be an integer") {
			t.Fatalf("invalid argument %v does not name the member at fault", invalid.err)
		}
		key := newKey()
		wantCode(t, d.charge(t, ctx, acct, key, map[string]any{"customer": "cus_declined"}), codes.FailedPrecondition)
		// A decline is recorded, as its 402 is.
		declined := d.charge(t, ctx, acct, key, map[string]any{"customer": "cus_declined"})
		wantCode(t, declined, codes.FailedPrecondition)
		d.wantMoney(t, acct, 0)
	})
}

// TestGRPCProviderDown: a transient provider failure is UNAVAILABLE, not
// recorded, so the client interceptor's retries with the key run it again
// until the provider takes the money, once.
func TestGRPCProviderDown(t *testing.T) {
	d := serveGRPC(t, func(cfg *app.Config) { cfg.ProviderFailureRate = 0.5 })
	acct := newAccount()
	var charged int
	for range 10 {
		c := d.charge(t, t.Context(), acct, newKey(), nil)
		if c.err == nil {
			charged++
		} else {
			wantCode(t, c, codes.Unavailable) // after all its attempts
		}
	}
	d.wantMoney(t, acct, charged)
	if charged == 0 {
		t.Fatal("no charge went through five attempts at a provider failing half the time")
	}
}

// TestGRPCShutdownWaitsForCalls: at SIGTERM, a charge running over gRPC
// ends with its answer, and Serve returns cleanly, before the database
// closes.
func TestGRPCShutdownWaitsForCalls(t *testing.T) {
	d := serveGRPC(t, func(cfg *app.Config) { cfg.ProviderLatency = 300 * time.Millisecond })
	acct := newAccount()
	done := make(chan grpcCharge, 1)
	go func() { done <- d.charge(t, context.Background(), acct, newKey(), nil) }()
	for deadline := time.Now().Add(10 * time.Second); d.app.Provider.Counts(acct).Calls == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the charge never reached the provider")
		}
	}
	if err := d.shutdown(t, time.Minute); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	wantCode(t, <-done, codes.OK)
	if c := d.app.Provider.Counts(acct); c.Authorizations != 1 {
		t.Fatalf("provider %+v, want one authorization", c)
	}
}

// readmeClient is the README's gRPC client, as the README shows it.
func readmeClient(ctx context.Context, addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(idemgrpc.ClientConfig{})))
	if err != nil {
		return err
	}
	defer conn.Close()
	req, err := structpb.NewStruct(map[string]any{"amount": 1999, "currency": "usd", "customer": "cus_42", "description": "Order #1"})
	if err != nil {
		return err
	}
	// The interceptor gives the call a key and keeps it for its retries; a key kept with the
	// order would go in the metadata too: ctx = idemgrpc.WithOutgoingKey(ctx, key).
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer acct_1")
	var charge structpb.Struct
	var header metadata.MD
	if err := conn.Invoke(ctx, "/payments.v1.Charges/Create", req, &charge, grpc.Header(&header)); err != nil {
		return err // status.Code(err): INVALID_ARGUMENT, FAILED_PRECONDITION, UNAVAILABLE, ...
	}
	fmt.Println(charge.Fields["id"].GetStringValue(), idemgrpc.Replayed(header))
	return nil
}

// TestGRPCREADMEClient runs the README's gRPC client against the demo,
// and checks that the README shows it as it is here.
func TestGRPCREADMEClient(t *testing.T) {
	d := serveGRPC(t, nil)
	if err := readmeClient(t.Context(), d.grpc); err != nil {
		t.Fatal(err)
	}
	d.wantMoney(t, "acct_1", 1)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("grpc_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(readme), "```go\nconn, err := grpc.NewClient(addr")
	block, _, _ = strings.Cut(block, "```\n")
	var indented strings.Builder
	for _, line := range strings.SplitAfter("conn, err := grpc.NewClient(addr"+block, "\n") {
		if line != "\n" && line != "" {
			indented.WriteString("\t")
		}
		indented.WriteString(line)
	}
	if block == "" || !strings.Contains(string(src), indented.String()) {
		t.Fatalf("README.md's gRPC client is not readmeClient's body:\n%s", block)
	}
}
