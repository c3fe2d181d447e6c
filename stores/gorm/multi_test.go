package gormstore

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
	"gorm.io/gorm"
)

// independentPools opens n connection pools to one database, as n server
// processes would.
func independentPools(t *testing.T, b backend, n int) []*gorm.DB {
	t.Helper()
	var dial func() (*gorm.DB, error)
	switch b.name {
	case "sqlite":
		path := filepath.Join(t.TempDir(), "idem.db")
		dial = func() (*gorm.DB, error) { return sqlitedb.Open(path, quiet()) }
	case "postgres":
		dsn := serverDSN(t, postgresEnv)
		dial = func() (*gorm.DB, error) { return openServer(dialPostgres(dsn), 10) }
	case "mysql":
		dsn := serverDSN(t, mysqlEnv)
		dial = func() (*gorm.DB, error) { return openServer(dialMySQL(dsn), 10) }
	}
	pools := make([]*gorm.DB, n)
	for i := range pools {
		db, err := dial()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if sqlDB, err := db.DB(); err == nil {
				_ = sqlDB.Close()
			}
		})
		pools[i] = db
	}
	return pools
}

// TestMultiInstance: three instances, each with its own engine and pool,
// behind three servers, get 200 parallel requests with one key, round
// robin. The slow handler runs exactly once; every other request gets 409
// or the replay.
func TestMultiInstance(t *testing.T) {
	const (
		instances = 3
		requests  = 200
		key       = "multi-1"
	)
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			pools := independentPools(t, b, instances)
			table := newStore(t, pools[0]).Table()
			var runs atomic.Int32
			handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := runs.Add(1)
				time.Sleep(300 * time.Millisecond)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"run":%d}`, n)
			})
			urls := make([]string, instances)
			for i, db := range pools {
				s, err := New(db, WithTable(table), WithPurgeInterval(0))
				if err != nil {
					t.Fatal(err)
				}
				srv := httptest.NewServer(idemhttp.Middleware(quietEngine(s, nil))(handler))
				t.Cleanup(srv.Close)
				urls[i] = srv.URL
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: requests}, Timeout: time.Minute}
			t.Cleanup(client.CloseIdleConnections)

			var (
				mu       sync.Mutex
				statuses = map[string]int{}
				bodies   = map[string]bool{}
				wg       sync.WaitGroup
			)
			start := make(chan struct{})
			for i := range requests {
				wg.Go(func() {
					<-start
					req, _ := http.NewRequest(http.MethodPost, urls[i%instances]+"/v1/orders", strings.NewReader(`{"sku":"a"}`))
					req.Header.Set("Idempotency-Key", key)
					req.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					kind := fmt.Sprint(resp.StatusCode)
					if resp.Header.Get(idem.ReplayedHeader) == "true" {
						kind += " replayed"
					}
					mu.Lock()
					defer mu.Unlock()
					statuses[kind]++
					if resp.StatusCode == http.StatusCreated {
						bodies[string(body)] = true
					}
				})
			}
			close(start)
			wg.Wait()
			if n := runs.Load(); n != 1 {
				t.Fatalf("the handler ran %d times, want once (responses %v)", n, statuses)
			}
			if statuses["201"] != 1 || statuses["201"]+statuses["201 replayed"]+statuses["409"] != requests || len(bodies) != 1 {
				t.Fatalf("responses %v with %d distinct bodies; want one 201, the rest 409 or the replay of the same body", statuses, len(bodies))
			}
			t.Logf("responses: %v", statuses)
		})
	}
}
