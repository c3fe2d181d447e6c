package memstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// modelRecord is what a test expects the store to hold for an ID.
type modelRecord struct {
	token   string
	expires time.Time
	body    string
	done    bool
}

// churn runs ops random steps of acquire, complete, release and purge on s
// against a model of what it must hold, checking each Get, and each
// shard's index against its arena, every check steps. Most records live
// a few hundred milliseconds and some a minute, so chunks go sparse around
// their survivors and are compacted.
func churn(t *testing.T, s *Store, seed uint64, keys, ops, check int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 7))
	t0 := time.Date(2031, 3, 14, 0, 0, 0, 0, time.UTC)
	now := t0
	model := map[idem.ID]modelRecord{}
	scopes := []string{"", "a", "ab", "tenant-42"}
	var pending []idem.ID // in flight in the model, maybe expired since
	for i := range ops {
		now = now.Add(time.Duration(rng.IntN(10)) * time.Millisecond)
		id := idem.ID{Scope: scopes[rng.IntN(len(scopes))], Key: fmt.Sprint("k", rng.IntN(keys))}
		op := rng.IntN(10)
		if op >= 5 && op < 9 && len(pending) > 0 {
			// Complete or release a key in flight, in any order.
			j := rng.IntN(len(pending))
			id = pending[j]
			pending[j] = pending[len(pending)-1]
			pending = pending[:len(pending)-1]
		}
		m, held := model[id]
		if held && !now.Before(m.expires) {
			held = false
		}
		switch {
		case op < 5:
			token := fmt.Sprint("tok-", i)
			_, outcome, err := s.Acquire(ctx, idem.Acquire{ID: id, Token: token, Now: now,
				LeaseUntil: now.Add(time.Hour), ExpiresAt: now.Add(time.Hour)})
			switch {
			case err != nil:
				t.Fatalf("step %d: Acquire: %v", i, err)
			case held && outcome != idem.AcquireExisting, !held && outcome != idem.AcquireCreated:
				t.Fatalf("step %d: Acquire %v of a key held=%v", i, outcome, held)
			case !held:
				model[id] = modelRecord{token: token, expires: now.Add(time.Hour)}
				pending = append(pending, id)
			}
		case op < 8:
			if !held || m.done {
				continue
			}
			// Bodies of every size, some past a chunk's.
			body := strings.Repeat(fmt.Sprint(id, i), 1+rng.IntN(8))
			if rng.IntN(200) == 0 {
				body = strings.Repeat("x", maxChunk+rng.IntN(1000))
			}
			ttl := time.Duration(1+rng.IntN(500)) * time.Millisecond
			if rng.IntN(3) == 0 {
				ttl = time.Duration(20+rng.IntN(40)) * time.Second
			}
			if err := s.Complete(ctx, id, m.token, idem.Completion{Response: exchange.Response{Status: 200 + i%7,
				Header: []exchange.HeaderField{{Name: "Content-Type", Values: []string{"application/json"}}, {Name: "X-Step", Values: []string{fmt.Sprint(i), ""}}},
				Body:   []byte(body)}, CompletedAt: now, ExpiresAt: now.Add(ttl)}); err != nil {
				t.Fatalf("step %d: Complete: %v", i, err)
			}
			model[id] = modelRecord{token: m.token, expires: now.Add(ttl), body: body, done: true}
		case op < 9:
			if !held || m.done {
				continue
			}
			if err := s.Release(ctx, id, m.token); err != nil {
				t.Fatalf("step %d: Release: %v", i, err)
			}
			delete(model, id)
		default:
			if _, err := s.Purge(ctx, now, 1+rng.IntN(50)); err != nil {
				t.Fatal(err)
			}
		}
		if i%check == 0 {
			if err := s.recount(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
			for id, m := range model {
				rec, err := s.Get(ctx, id)
				if err != nil {
					// Purged once expired, which the model does not follow.
					if !now.Before(m.expires) {
						delete(model, id)
						continue
					}
					t.Fatalf("step %d: Get(%v): %v", i, id, err)
				}
				if rec.ID != id || rec.Token != m.token || string(rec.Response.Body) != m.body ||
					(rec.State == idem.Completed) != m.done {
					t.Fatalf("step %d: Get(%v) = %s %q %q, want done=%v %q %q", i, id, rec.State, rec.Token,
						rec.Response.Body, m.done, m.token, m.body)
				}
				if m.done && (rec.Response.Get("Content-Type") != "application/json" || len(rec.Response.Header) != 2 ||
					len(rec.Response.Header[1].Values) != 2) {
					t.Fatalf("step %d: Get(%v) header %v", i, id, rec.Response.Header)
				}
			}
		}
	}
	// Once everything has expired and been purged, no chunk is left.
	if _, err := s.Purge(ctx, now.Add(2*time.Hour), 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := s.recount(); err != nil {
		t.Fatal(err)
	}
	for i := range s.shards {
		if a := &s.shards[i].arena; a.size != 0 || s.shards[i].index.n != 0 {
			t.Fatalf("shard %d keeps %d bytes of arena and %d index entries with no records", i, a.size, s.shards[i].index.n)
		}
	}
}

// Compaction, index deletions and chunk reuse keep every record findable
// and intact.
func TestArenaChurn(t *testing.T) {
	for seed := range uint64(2) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := New(WithMaxRecords(1<<20), WithPurgeInterval(0))
			churn(t, s, seed, 20_000, 40_000, 2000)
		})
	}
}

// A lookup compares whole digests: with every index tag the same (every
// record of a shard then starts its probe at one slot), the store still
// never returns another key's record, and deletions leave the others
// findable.
func TestIndexTagCollisions(t *testing.T) {
	s := New(WithMaxRecords(1<<20), WithPurgeInterval(0))
	s.tagMask = 0
	churn(t, s, 99, 1000, 10_000, 200)
}

// The digest separates the scope from the key: ("a", "bc") and ("ab", "c")
// are two records.
func TestDigestSeparatesScopeAndKey(t *testing.T) {
	if digestOf("a", "bc") == digestOf("ab", "c") || digestOf("", "abc") == digestOf("abc", "") {
		t.Fatal("IDs with the same text joined share a digest")
	}
	ctx := context.Background()
	s := New(WithPurgeInterval(0))
	s.tagMask = 0
	now := time.Now()
	for _, id := range []idem.ID{{Scope: "a", Key: "bc"}, {Scope: "ab", Key: "c"}} {
		if _, _, err := s.Acquire(ctx, idem.Acquire{ID: id, Token: id.Scope, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, id, id.Scope, idem.Completion{Response: exchange.Response{Status: 201, Body: []byte(id.Scope)}, CompletedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []idem.ID{{Scope: "a", Key: "bc"}, {Scope: "ab", Key: "c"}} {
		if rec, err := s.Get(ctx, id); err != nil || rec.Token != id.Scope || string(rec.Response.Body) != id.Scope {
			t.Fatalf("Get(%v) = %q %q, %v", id, rec.Token, rec.Response.Body, err)
		}
	}
}
