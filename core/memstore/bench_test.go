package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/memstore"
)

// The store's share of a request, without the Engine:
//
//	go test -run XXX -bench . -benchmem ./core/memstore/

var benchResponse = exchange.Response{
	Status: 201,
	Header: []exchange.HeaderField{
		{Name: "Content-Type", Values: []string{"application/json"}},
		{Name: "Location", Values: []string{"/v1/charges/ch_1"}},
	},
	Body: []byte(`{"id":"ch_3MmlLrLkdIwHu7ix0snN0B15","object":"charge","amount":1999,"currency":"usd","customer":"cus_8f3a","status":"succeeded","created":"2026-11-22T13:21:41Z"}`),
}

// BenchmarkAcquireComplete: a new key acquired and completed, the store
// growing as traffic makes it.
func BenchmarkAcquireComplete(b *testing.B) {
	s := memstore.New(memstore.WithMaxRecords(1<<30), memstore.WithPurgeInterval(0))
	defer s.Close()
	ctx := context.Background()
	now := time.Now()
	keys := make([]string, 0, 1024)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%1024 == 0 {
			keys = keys[:0]
			for j := range 1024 {
				keys = append(keys, "k-"+strconv.Itoa(i+j))
			}
		}
		id := idem.ID{Scope: "acct", Key: keys[i%1024]}
		a := idem.Acquire{ID: id, Token: "t", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
		if _, outcome, err := s.Acquire(ctx, a); err != nil || outcome != idem.AcquireCreated {
			b.Fatal(outcome, err)
		}
		if err := s.Complete(ctx, id, "t", idem.Completion{Response: benchResponse, CompletedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireExisting: the read a replay makes.
func BenchmarkAcquireExisting(b *testing.B) {
	s := memstore.New(memstore.WithPurgeInterval(0))
	defer s.Close()
	ctx := context.Background()
	now := time.Now()
	id := idem.ID{Scope: "acct", Key: "k"}
	a := idem.Acquire{ID: id, Token: "t", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	if _, _, err := s.Acquire(ctx, a); err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(ctx, id, "t", idem.Completion{Response: benchResponse, CompletedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if rec, outcome, err := s.Acquire(ctx, a); err != nil || outcome != idem.AcquireExisting || rec.Response.Status != 201 {
			b.Fatal(outcome, err)
		}
	}
}
