package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idemkit/core/memstore"
)

// Stats shows how full the store is before 429s begin, and what the purges
// deleted; a sweep a full store makes for a new key is no purge.
func TestStatsCountRecordsAndPurges(t *testing.T) {
	s := memstore.New(memstore.WithMaxRecords(5), memstore.WithPurgeInterval(0))
	defer s.Close()
	if got := s.Stats(); got != (memstore.Stats{MaxRecords: 5}) {
		t.Fatalf("a new store: %+v", got)
	}
	if n := fill(t, s, "", "k-", 3, at); n != 3 {
		t.Fatalf("filled %d", n)
	}
	if got := s.Stats(); got.Records != 3 || got.MaxRecords != 5 || got.PurgeBatches != 0 {
		t.Fatalf("three records held: %+v", got)
	}

	// The first three expire after a minute; a full store sweeps them for
	// a new key, which is not a purge.
	if n := fill(t, s, "", "full-", 5, at.Add(30*time.Second)); n != 2 {
		t.Fatalf("filled %d more", n)
	}
	if n := fill(t, s, "", "late-", 1, at.Add(70*time.Second)); n != 1 {
		t.Fatal("an expired record was not swept for a new key")
	}
	got := s.Stats()
	if got.Records != 3 || got.Purged != 0 || got.PurgeBatches != 0 {
		t.Fatalf("after a sweep for room: %+v, want 3 records and no purge", got)
	}

	if n, err := s.Purge(context.Background(), at.Add(time.Hour), 2); err != nil || n != 2 {
		t.Fatalf("Purge: %d, %v", n, err)
	}
	if n, err := s.Purge(context.Background(), at.Add(time.Hour), 2); err != nil || n != 1 {
		t.Fatalf("Purge: %d, %v", n, err)
	}
	got = s.Stats()
	if got.Records != 0 || got.Purged != 3 || got.PurgeBatches != 2 || got.PurgeTime <= 0 {
		t.Fatalf("after two purge batches: %+v, want 0 records, 3 purged in 2 batches", got)
	}
}
