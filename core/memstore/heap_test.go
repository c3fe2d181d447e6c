package memstore_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/memstore"
)

// A store holding many records must stay cheap for the garbage collector
// and small: its records are packed into a few large pointer-free chunks,
// not kept as several small objects each that the collector marks on
// every cycle (a token, a response, the ID's strings), which made a
// million records cost some 600 MB and slowed every request. The bounds are
// generous (the layout takes about 300 bytes and one chunk per thirty
// records here, less at a million); the old one took 463 bytes and 3 objects.
func TestRecordsAreCompactAndPointerFree(t *testing.T) {
	const n = 50_000
	ctx := context.Background()
	s := memstore.New(memstore.WithMaxRecords(n), memstore.WithPurgeInterval(0))
	defer s.Close()
	now := time.Now()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range n {
		// Fresh strings per request, as a server makes them: what the
		// store keeps of them is its own cost.
		id := idem.ID{Key: fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)}
		token := "4f9a1c0de2b37a65-" + strconv.FormatInt(int64(i), 16)
		if _, _, err := s.Acquire(ctx, idem.Acquire{ID: id, Token: token, Now: now,
			LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(24 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, id, token, idem.Completion{Response: response150(i), CompletedAt: now,
			ExpiresAt: now.Add(24 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	bytes := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	objects := float64(int64(after.HeapObjects)-int64(before.HeapObjects)) / n
	t.Logf("%d records: %.0f B and %.4f heap objects per record", n, bytes, objects)
	if bytes > 350 {
		t.Errorf("%.0f B of heap per record with a 150-byte response, want at most 350", bytes)
	}
	if objects > 0.1 {
		t.Errorf("%.3f heap objects per record, want almost none: records must not be objects of their own", objects)
	}
	// What was stored is what is replayed.
	for _, i := range []int{0, n / 2, n - 1} {
		id := idem.ID{Key: fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)}
		rec, err := s.Get(ctx, id)
		want := response150(i)
		if err != nil || rec.State != idem.Completed || string(rec.Response.Body) != string(want.Body) ||
			rec.Response.Get("Content-Type") != "application/json" || rec.Token != "4f9a1c0de2b37a65-"+strconv.FormatInt(int64(i), 16) {
			t.Fatalf("record %d: %+v, %v", i, rec, err)
		}
	}
	runtime.KeepAlive(s)
}

// response150 is a created order: 150 bytes of JSON, as the load
// benchmarks' handler writes.
func response150(i int) exchange.Response {
	body := fmt.Sprintf(`{"id":"ord_%013d","item":"paperback-0042","quantity":3,"customer":"cus_8f14e45fceea167a","amount":5997,"currency":"usd","created":1780000000}`+"\n", 1e12+i)
	return exchange.Response{Status: 201, Header: []exchange.HeaderField{{Name: "Content-Type", Values: []string{"application/json"}}},
		Body: []byte(body)}
}
