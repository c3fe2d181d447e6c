package redisstore

import (
	"errors"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// A client library may send a script again when the connection drops
// after Redis ran it but before the reply arrived (go-redis retries on
// EOF). These tests run each script twice, as such a retry would.

// TestAcquireSentTwice: the second run of an acquisition answers what the
// first did, not Existing (the caller would answer 409 for a key it holds,
// until its own lease ran out).
func TestAcquireSentTwice(t *testing.T) {
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			s := newStore(t, top.dial(t))
			ctx := testContext(t)
			id := idem.ID{Scope: "s", Key: "twice"}
			a := acquireAt(id, "tok-1", t0)
			for run := range 2 {
				rec, o, err := s.Acquire(ctx, a)
				if err != nil || o != idem.AcquireCreated || rec.Token != "tok-1" {
					t.Fatalf("run %d: %v token %q %v, want created", run, o, rec.Token, err)
				}
			}
			b := acquireAt(id, "tok-2", t0.Add(lease))
			for run := range 2 {
				rec, o, err := s.Acquire(ctx, b)
				if err != nil || o != idem.AcquireTookOver || rec.Token != "tok-2" {
					t.Fatalf("takeover run %d: %v token %q %v, want took-over", run, o, rec.Token, err)
				}
			}
			// Anyone else still finds the record held.
			rec, o, err := s.Acquire(ctx, acquireAt(id, "tok-3", t0.Add(lease+time.Second)))
			if err != nil || o != idem.AcquireExisting || rec.Token != "tok-2" {
				t.Fatalf("another request: %v token %q %v, want existing held by tok-2", o, rec.Token, err)
			}
		})
	}
}

// TestCompleteSentTwice: the same completion run again succeeds and
// changes nothing; any other completion of the record stays fenced.
func TestCompleteSentTwice(t *testing.T) {
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			s := newStore(t, top.dial(t))
			ctx := testContext(t)
			id := idem.ID{Scope: "s", Key: "twice"}
			if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
				t.Fatal(err)
			}
			c := idem.Completion{Response: exchange.Response{Status: 201, Body: []byte(`{"id":1}`)}, CompletedAt: t0, ExpiresAt: t0.Add(ttl)}
			for run := range 2 {
				if err := s.Complete(ctx, id, "tok", c); err != nil {
					t.Fatalf("run %d: %v", run, err)
				}
			}
			other := c
			other.Response.Body = []byte(`{"id":2}`)
			if err := s.Complete(ctx, id, "tok", other); !errors.Is(err, idem.ErrLockLost) {
				t.Fatalf("another completion: %v, want ErrLockLost", err)
			}
			if err := s.Complete(ctx, id, "tok-other", c); !errors.Is(err, idem.ErrLockLost) {
				t.Fatalf("the same completion by another token: %v, want ErrLockLost", err)
			}
			rec, err := s.Get(ctx, id)
			if err != nil || string(rec.Response.Body) != `{"id":1}` {
				t.Fatalf("stored %q (%v), want the first completion", rec.Response.Body, err)
			}
		})
	}
}
