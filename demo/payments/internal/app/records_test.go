package app

import (
	"crypto/rand"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	redisstore "github.com/idemkit/idemkit/stores/redis"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idemkit/demo/payments/internal/payments"
)

// TestRecordsInRedis: with Records naming a Redis, a charge's idempotency
// record is written there, under the demo's prefix, and none in the
// database, whose charge row carries the request's scoped key instead; a
// retry is replayed from Redis.
func TestRecordsInRedis(t *testing.T) {
	addr := os.Getenv("IDEMKIT_TEST_REDIS_ADDR")
	if addr == "" {
		if testing.Short() {
			return
		}
		t.Fatal("IDEMKIT_TEST_REDIS_ADDR is not set: run the tests with `make test`, which starts redis-server")
	}
	cfg := DefaultConfig()
	cfg.DB, cfg.Records, cfg.ProviderLatency = filepath.Join(t.TempDir(), "p.db"), "redis://"+addr+"/0", 0
	a, err := Open(t.Context(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Store != nil || !a.API.KeyedRows {
		t.Fatalf("records in Redis: GORM store %v, keyed rows %v", a.Store, a.API.KeyedRows)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go a.Server.Serve(ln)
	defer a.Server.Shutdown(t.Context())

	acct := "acct_" + rand.Text()[:10]
	post := func() *http.Response {
		req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+"/v1/charges",
			strings.NewReader(`{"amount":1999,"currency":"usd","customer":"cus_1"}`))
		req.Header.Set("Authorization", "Bearer "+acct)
		req.Header.Set("Idempotency-Key", `"redis-1"`)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := post(); resp.StatusCode != http.StatusCreated {
		t.Fatalf("charge: %s", resp.Status)
	}
	if resp := post(); resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry: %s, replayed %q", resp.Status, resp.Header.Get("Idempotent-Replayed"))
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
	key := names.Key(idem.ID{Scope: acct, Key: "redis-1"})
	if n, err := client.Exists(t.Context(), key).Result(); err != nil || n != 1 {
		t.Fatalf("the charge's record %s is not in Redis (%d, %v)", key, n, err)
	}
}
