package app

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/internal/testservers"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	redisstore "github.com/idemkit/idemkit/stores/redis"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/payments"
)

// redisAddr returns the test Redis's address, or "" under -short without
// one.
func redisAddr(t *testing.T) string {
	t.Helper()
	return testservers.Optional(t, testservers.RedisAddr)
}

// serve opens the demo with cfg and serves its API until the test ends,
// without the provider's events. It returns the App and the server's
// base URL.
func serve(t *testing.T, cfg Config) (*App, string) {
	t.Helper()
	a, ln := open(t, cfg)
	go a.Server.Serve(ln)
	t.Cleanup(func() {
		a.Server.Shutdown(context.Background())
		a.Close()
	})
	return a, "http://" + ln.Addr().String()
}

// open opens the demo with cfg and a listener for it.
func open(t *testing.T, cfg Config) (*App, net.Listener) {
	t.Helper()
	a, err := Open(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	return a, ln
}

// loseRecord deletes the record of id from the Redis at addr, as a Redis
// that lost it would.
func loseRecord(t *testing.T, addr string, id idem.ID) {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer client.Close()
	names, err := redisstore.New(client, redisstore.WithPrefix(RedisPrefix))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := client.Del(t.Context(), names.Key(id)).Result(); err != nil || n != 1 {
		t.Fatalf("deleting the record of %+v: %d %v", id, n, err)
	}
}

// answer is what a charge request got.
type answer struct {
	status   int
	id       string
	amount   int64
	replayed bool
}

// postCharge sends a charge of amount cents for account with the
// Idempotency-Key key.
func postCharge(t *testing.T, base, account, key string, amount int) answer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/charges",
		strings.NewReader(fmt.Sprintf(`{"amount":%d,"currency":"usd","customer":"cus_1"}`, amount)))
	req.Header.Set("Authorization", "Bearer "+account)
	req.Header.Set("Idempotency-Key", `"`+key+`"`)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c struct {
		ID     string `json:"id"`
		Amount int64  `json:"amount"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, c.ID, c.Amount, resp.Header.Get("Idempotent-Replayed") == "true"}
}

// TestRecordsInRedis: with Records naming a Redis, a charge's idempotency
// record is written there, under the demo's prefix, and none in the
// database, whose charge row carries the request's scoped key instead; a
// retry is replayed from Redis.
func TestRecordsInRedis(t *testing.T) {
	addr := redisAddr(t)
	if addr == "" {
		return
	}
	cfg := DefaultConfig()
	cfg.DB, cfg.Records, cfg.ProviderLatency = filepath.Join(t.TempDir(), "p.db"), "redis://"+addr+"/0", 0
	a, base := serve(t, cfg)
	if a.Store != nil || !a.API.KeyedRows {
		t.Fatalf("records in Redis: GORM store %v, keyed rows %v", a.Store, a.API.KeyedRows)
	}

	acct := "acct_" + rand.Text()[:10]
	if r := postCharge(t, base, acct, "redis-1", 1999); r.status != http.StatusCreated {
		t.Fatalf("charge: %+v", r)
	}
	if r := postCharge(t, base, acct, "redis-1", 1999); r.status != http.StatusCreated || !r.replayed {
		t.Fatalf("retry: %+v, want a replay", r)
	}

	var c payments.Charge
	if err := a.DB.Where("account = ?", acct).Take(&c).Error; err != nil {
		t.Fatal(err)
	}
	if c.RequestKey == nil || !strings.HasPrefix(*c.RequestKey, "idem_") {
		t.Fatalf("the charge row carries request key %v, want the scoped key's hash", c.RequestKey)
	}
	if a.DB.Migrator().HasTable(gormstore.DefaultTable) {
		t.Fatalf("records in Redis, yet the database has the GORM store's table %s", gormstore.DefaultTable)
	}
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer client.Close()
	names, err := redisstore.New(client, redisstore.WithPrefix(RedisPrefix))
	if err != nil {
		t.Fatal(err)
	}
	key := names.Key(idem.ID{Scope: api.AccountScope(acct), Key: "redis-1"})
	if n, err := client.Exists(t.Context(), key).Result(); err != nil || n != 1 {
		t.Fatalf("the charge's record %s is not in Redis (%d, %v)", key, n, err)
	}
}

// TestExpiredKeyIsNewWithRecordsInRedis: with the records in Redis, a key
// whose record expired makes a new charge, as the policy says, though the
// charge row the key made before is still there; and the unique-key
// defence still answers for a record Redis lost before it expired. The
// Engine's clock is moved past the TTL rather than waited for.
func TestExpiredKeyIsNewWithRecordsInRedis(t *testing.T) {
	addr := redisAddr(t)
	if addr == "" {
		return
	}
	clock := idemtest.NewClock(time.Now())
	cfg := DefaultConfig()
	cfg.DB, cfg.Records, cfg.ProviderLatency = filepath.Join(t.TempDir(), "p.db"), "redis://"+addr+"/0", 0
	cfg.TTL, cfg.Now = 10*time.Minute, clock.Now
	a, base := serve(t, cfg)

	acct, key := "acct_"+rand.Text()[:10], "expiring-"+rand.Text()
	post := func(amount int) answer { t.Helper(); return postCharge(t, base, acct, key, amount) }
	want := func(what string, got answer, status int, id string, replayed bool) {
		t.Helper()
		if got.status != status || (id != "" && got.id != id) || got.replayed != replayed {
			t.Fatalf("%s: %+v, want status %d, charge %q, replayed %v", what, got, status, id, replayed)
		}
	}

	first := post(1999)
	want("the charge", first, 201, "", false)
	want("its retry", post(1999), 201, first.id, true)

	clock.Advance(cfg.TTL)
	second := post(1999)
	if second.status != 201 || second.replayed || second.id == first.id {
		t.Fatalf("the key once its record expired: %+v, want a new charge (the expired key's was %s)", second, first.id)
	}
	want("the new charge's retry", post(1999), 201, second.id, true)

	// Redis loses the new charge's record before it expires: the retry
	// runs the handler again, which answers with the charge under the key.
	loseRecord(t, addr, idem.ID{Scope: api.AccountScope(acct), Key: key})
	want("the retry after Redis lost the record", post(1999), 201, second.id, false)

	// Expired again, the key comes back with another amount: a charge of
	// that amount, not 422.
	clock.Advance(cfg.TTL)
	third := post(500)
	if third.status != 201 || third.replayed || third.amount != 500 || third.id == second.id {
		t.Fatalf("the key expired again, with another amount: %+v, want a new charge of 500", third)
	}

	b, err := payments.GetBalance(t.Context(), a.DB, acct)
	if err != nil {
		t.Fatal(err)
	}
	if c := a.Provider.Counts(acct); b.Charges != 3 || b.Charged != 1999+1999+500 || c.Authorizations != 3 {
		t.Fatalf("balance %+v, provider %+v: want three charges, each authorized", b, c)
	}
}
