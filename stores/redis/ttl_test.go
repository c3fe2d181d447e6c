package redisstore

import (
	"errors"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/redis/go-redis/v9"
)

// pttl returns the TTL Redis has for id's record.
func pttl(t *testing.T, c redis.UniversalClient, s *Store, id idem.ID) time.Duration {
	t.Helper()
	d, err := c.PTTL(testContext(t), s.Key(id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// within reports whether got is want, or at most slack less: the TTL
// starts counting down when Redis runs the script.
func within(got, want time.Duration) bool {
	const slack = time.Minute
	return got <= want && got > want-slack
}

// TestTTLFollowsRecord: Redis removes a record by its TTL, which is
// always the time the record still counts by the Engine's clock: until
// the later of expiry and lease while in flight, TTL after completion.
func TestTTLFollowsRecord(t *testing.T) {
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			c := top.dial(t)
			s := newStore(t, c)
			ctx := testContext(t)
			id := idem.ID{Scope: "s", Key: "ttl"}
			if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
				t.Fatal(err)
			}
			if d := pttl(t, c, s, id); !within(d, ttl) {
				t.Fatalf("in flight: TTL %v, want %v", d, ttl)
			}
			// A renewal within the record's expiry leaves the TTL alone...
			if err := s.Renew(ctx, id, "tok", t0.Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if d := pttl(t, c, s, id); !within(d, ttl) {
				t.Fatalf("renewed within the expiry: TTL %v, want %v", d, ttl)
			}
			// ...and one past it moves the TTL by as much as it moves the end.
			if err := s.Renew(ctx, id, "tok", t0.Add(ttl+3*time.Hour)); err != nil {
				t.Fatal(err)
			}
			if d := pttl(t, c, s, id); !within(d, ttl+3*time.Hour) {
				t.Fatalf("renewed past the expiry: TTL %v, want %v", d, ttl+3*time.Hour)
			}
			if err := s.Renew(ctx, id, "tok", t0.Add(ttl+5*time.Hour+time.Millisecond/2)); err != nil {
				t.Fatal(err)
			}
			if d := pttl(t, c, s, id); !within(d, ttl+5*time.Hour+time.Millisecond) {
				t.Fatalf("renewed again: TTL %v, want %v", d, ttl+5*time.Hour+time.Millisecond)
			}
			done := t0.Add(ttl + 4*time.Hour)
			err := s.Complete(ctx, id, "tok", idem.Completion{Response: exchange.Response{Status: 201, Body: []byte("ok")},
				CompletedAt: done, ExpiresAt: done.Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			if d := pttl(t, c, s, id); !within(d, time.Hour) {
				t.Fatalf("completed: TTL %v, want 1h", d)
			}
			// A takeover's record lives as long as a new one.
			id2 := idem.ID{Scope: "s", Key: "ttl-takeover"}
			if _, _, err := s.Acquire(ctx, acquireAt(id2, "tok-1", t0)); err != nil {
				t.Fatal(err)
			}
			a := acquireAt(id2, "tok-2", t0.Add(lease))
			a.ExpiresAt = a.Now.Add(2 * time.Hour)
			if _, o, err := s.Acquire(ctx, a); err != nil || o != idem.AcquireTookOver {
				t.Fatalf("takeover: %v %v", o, err)
			}
			if d := pttl(t, c, s, id2); !within(d, 2*time.Hour) {
				t.Fatalf("taken over: TTL %v, want 2h", d)
			}
		})
	}
}

// TestEngineTimesFarAway: the store never compares the Engine's times
// with Redis's clock, so a record made at a time far from Redis's (a
// simulated clock, a badly set host) lives exactly as long as it says.
func TestEngineTimesFarAway(t *testing.T) {
	c := dialSingle(t)
	s := newStore(t, c)
	ctx := testContext(t)
	for _, now := range []time.Time{
		time.Date(2001, 9, 9, 1, 46, 40, 0, time.UTC),
		time.Date(1969, 7, 20, 20, 17, 40, 123_456_789, time.UTC),
		time.Date(2199, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
	} {
		id := idem.ID{Key: now.String()}
		if _, o, err := s.Acquire(ctx, acquireAt(id, "tok", now)); err != nil || o != idem.AcquireCreated {
			t.Fatalf("%v: Acquire %v %v", now, o, err)
		}
		rec, err := s.Get(ctx, id)
		if err != nil {
			t.Fatalf("%v: the record vanished: %v", now, err)
		}
		if !rec.LeaseUntil.Equal(now.Add(lease)) || !rec.ExpiresAt.Equal(now.Add(ttl)) || !rec.CreatedAt.Equal(now) {
			t.Fatalf("%v: times lease %v expires %v created %v", now, rec.LeaseUntil, rec.ExpiresAt, rec.CreatedAt)
		}
		if d := pttl(t, c, s, id); !within(d, ttl) {
			t.Fatalf("%v: TTL %v, want %v", now, d, ttl)
		}
		// Lease decisions are exact to the nanosecond.
		if _, o, _ := s.Acquire(ctx, acquireAt(id, "tok-2", now.Add(lease-time.Nanosecond))); o != idem.AcquireExisting {
			t.Fatalf("%v: a nanosecond before the lease ends: %v, want existing", now, o)
		}
		if _, o, _ := s.Acquire(ctx, acquireAt(id, "tok-3", now.Add(lease))); o != idem.AcquireTookOver {
			t.Fatalf("%v: when the lease ends: %v, want took-over", now, o)
		}
	}
}

// TestRedisRemovesExpired: once its TTL runs out, Redis removes the record
// by itself; no purger runs.
func TestRedisRemovesExpired(t *testing.T) {
	c := dialSingle(t)
	s := newStore(t, c)
	ctx := testContext(t)
	id := idem.ID{Key: "short-lived"}
	now := time.Now()
	a := idem.Acquire{ID: id, Fingerprint: fp, Token: "tok", Now: now,
		LeaseUntil: now.Add(20 * time.Millisecond), ExpiresAt: now.Add(50 * time.Millisecond)}
	if _, _, err := s.Acquire(ctx, a); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Get(ctx, id)
		if errors.Is(err, idem.ErrNotFound) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("Redis kept an expired record for 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
