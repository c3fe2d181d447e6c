package gormstore

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSQLiteConcurrentRequests: 100 concurrent requests against one SQLite
// file, each handler writing through its own transaction, two requests per
// key. No request fails with "database is locked" (it would be a 500 or a
// 503), and each key is charged exactly once.
func TestSQLiteConcurrentRequests(t *testing.T) {
	const requests, perKey = 100, 2
	db := openSQLite(t)
	s := newStore(t, db)
	charges := createCharges(t, db)
	var runs atomic.Int32
	url := serve(t, quietEngine(s, nil), chargeHandler(db, charges, &runs, hooks{}))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: requests}, Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	var (
		mu       sync.Mutex
		statuses = map[string]int{}
		wg       sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range requests {
		wg.Go(func() {
			<-start
			r, err := post(t, client, url, fmt.Sprint("key-", i/perKey))
			if err != nil {
				t.Error(err)
				return
			}
			kind := fmt.Sprint(r.status)
			if r.replayed {
				kind += " replayed"
			}
			mu.Lock()
			statuses[kind]++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	keys := requests / perKey
	if statuses["201"] != keys || statuses["201"]+statuses["201 replayed"]+statuses["409"] != requests {
		t.Fatalf("responses %v; want one 201 per key (%d), the rest 409 or replays", statuses, keys)
	}
	if n := countCharges(t, db, charges); n != keys || int(runs.Load()) != keys {
		t.Fatalf("%d charges from %d handler runs, want %d", n, runs.Load(), keys)
	}
}
