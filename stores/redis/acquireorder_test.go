package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/internal/acquireorder"
	"github.com/idemkit/idemkit/internal/testservers"
	"github.com/redis/go-redis/v9"
)

// commandNames is a go-redis hook noting the name of every command sent.
type commandNames struct {
	mu    sync.Mutex
	names []string
}

func (h *commandNames) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.names = append(h.names, cmd.Name())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *commandNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// take returns the names noted since the last call, space-separated. An
// EVAL right after an EVALSHA is the same script sent whole to a node that
// did not have it yet (go-redis's answer to NOSCRIPT), and is left out.
func (h *commandNames) take() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := strings.Join(h.names, " ")
	h.names = nil
	return strings.TrimSpace(strings.ReplaceAll(s+" ", "evalsha eval ", "evalsha "))
}

// Acquire runs its script first while new keys are the common case, so
// that a new key is one round trip, and reads first in a storm of
// retries, so that each replay or 409 is one HMGET, which costs Redis far
// less than a script.
func TestAcquireOrderFollowsTraffic(t *testing.T) {
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			h := &commandNames{}
			c := top.dial(t, h)
			s := newStore(t, c)
			h.take()
			ctx := testContext(t)
			calls := 0
			acquire := func(key string, want idem.AcquireOutcome) string {
				t.Helper()
				h.take()
				calls++
				if _, o, err := s.Acquire(ctx, acquireAt(idem.ID{Key: key}, fmt.Sprint("tok-", calls), t0)); err != nil || o != want {
					t.Fatalf("Acquire %s: %v, %v; want %v", key, o, err, want)
				}
				return h.take()
			}
			var got []string
			for i := range 3 {
				got = append(got, acquire(fmt.Sprint("new-", i), idem.AcquireCreated))
			}
			if want := "[evalsha evalsha evalsha]"; fmt.Sprint(got) != want {
				t.Fatalf("new keys sent %q, want %s: one script each", got, want)
			}
			got = got[:0]
			for range acquireorder.Bound + 6 {
				got = append(got, acquire("new-0", idem.AcquireExisting))
			}
			if got[0] != "evalsha" || got[len(got)-1] != "hmget" {
				t.Fatalf("retries of one key sent %q, want the script at first, then an HMGET alone", got)
			}
			got = got[:0]
			for i := range 3 * acquireorder.Bound {
				got = append(got, acquire(fmt.Sprint("after-", i), idem.AcquireCreated))
			}
			if got[0] != "hmget evalsha" || got[len(got)-1] != "evalsha" {
				t.Fatalf("new keys after the storm sent %q, want an HMGET and the script at first, then the script alone", got)
			}
		})
	}
}

// Read first, Acquire answers every record exactly as its script would:
// a live record is Existing from the read alone, and a record the caller
// may take (expired, or in flight with its lease lapsed, same request) is
// taken by the script.
func TestAcquireReadFirstDecidesAsTheScript(t *testing.T) {
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			s := newStore(t, top.dial(t))
			ctx := testContext(t)
			for range acquireorder.Bound + 1 {
				s.order.Saw(true)
			}
			other := fp
			other[0] = 'b'
			cases := []struct {
				name    string
				setup   func(id idem.ID) // leaves a record of id
				at      time.Time
				fp      idem.Fingerprint
				want    idem.AcquireOutcome
				wantTok string
			}{
				{"completed", s.completeOf(t, ctx), t0.Add(time.Hour), fp, idem.AcquireExisting, "tok-first"},
				{"completed, expired", s.completeOf(t, ctx), t0.Add(ttl), fp, idem.AcquireCreated, "tok-next"},
				{"in flight", s.holdOf(t, ctx), t0.Add(lease - time.Nanosecond), fp, idem.AcquireExisting, "tok-first"},
				{"in flight, lapsed", s.holdOf(t, ctx), t0.Add(lease), fp, idem.AcquireTookOver, "tok-next"},
				{"in flight, lapsed, another request", s.holdOf(t, ctx), t0.Add(lease), other, idem.AcquireExisting, "tok-first"},
				{"in flight, lapsed and expired", s.holdOf(t, ctx), t0.Add(ttl), other, idem.AcquireCreated, "tok-next"},
				// The same acquisition sent again: it holds the record already.
				{"in flight, held by this token", s.holdAs(t, ctx, "tok-next"), t0.Add(time.Second), fp, idem.AcquireCreated, "tok-next"},
			}
			for _, tc := range cases {
				id := idem.ID{Scope: "decide", Key: tc.name}
				tc.setup(id)
				if !s.order.ReadFirst() {
					t.Fatal("the store no longer reads first")
				}
				a := acquireAt(id, "tok-next", tc.at)
				a.Fingerprint = tc.fp
				rec, o, err := s.Acquire(ctx, a)
				if err != nil || o != tc.want || rec.Token != tc.wantTok {
					t.Errorf("%s: %v, token %q, %v; want %v, token %q", tc.name, o, rec.Token, err, tc.want, tc.wantTok)
				}
				for range acquireorder.Bound + 1 {
					s.order.Saw(true)
				}
			}
		})
	}
}

// holdOf returns a setup leaving id in flight, held by tok-first from t0.
func (s *Store) holdOf(t *testing.T, ctx context.Context) func(idem.ID) {
	return s.holdAs(t, ctx, "tok-first")
}

// holdAs returns a setup leaving id in flight, held by token from t0.
func (s *Store) holdAs(t *testing.T, ctx context.Context, token string) func(idem.ID) {
	return func(id idem.ID) {
		t.Helper()
		if _, o, err := s.acquire(ctx, acquireAt(id, token, t0)); err != nil || o != idem.AcquireCreated {
			t.Fatalf("acquire %v: %v, %v", id, o, err)
		}
	}
}

// completeOf returns a setup leaving id completed by tok-first at t0.
func (s *Store) completeOf(t *testing.T, ctx context.Context) func(idem.ID) {
	return func(id idem.ID) {
		t.Helper()
		s.holdOf(t, ctx)(id)
		err := s.Complete(ctx, id, "tok-first", idem.Completion{
			Response: exchange.Response{Status: 201, Body: []byte("ok")}, CompletedAt: t0, ExpiresAt: t0.Add(ttl)})
		if err != nil {
			t.Fatalf("complete %v: %v", id, err)
		}
	}
}

// A Cluster client that may read from replicas never answers Acquire from
// a read: a replica can still hold a record the master has replaced (a
// forgotten key run again), and its response would be replayed.
func TestAcquireNeverReadsFromReplicas(t *testing.T) {
	for _, opt := range []struct {
		name string
		set  func(*redis.ClusterOptions)
	}{
		{"ReadOnly", func(o *redis.ClusterOptions) { o.ReadOnly = true }},
		{"RouteByLatency", func(o *redis.ClusterOptions) { o.RouteByLatency = true }},
		{"RouteRandomly", func(o *redis.ClusterOptions) { o.RouteRandomly = true }},
	} {
		t.Run(opt.name, func(t *testing.T) {
			o := &redis.ClusterOptions{Addrs: strings.Split(testservers.Require(t, testservers.RedisClusterAddrs), ","), ContextTimeoutEnabled: true}
			opt.set(o)
			c := redis.NewClusterClient(o)
			t.Cleanup(func() { _ = c.Close() })
			// The hook goes in before the first command: once the client
			// has begun to load the cluster's state in the background,
			// AddHook races with it.
			h := &commandNames{}
			c.AddHook(h)
			ping(t, c)
			s := newStore(t, c)
			ctx := testContext(t)
			id := idem.ID{Key: "stormed"}
			s.completeOf(t, ctx)(id)
			h.take()
			for i := range 2 * acquireorder.Bound {
				if _, o, err := s.Acquire(ctx, acquireAt(id, fmt.Sprint("tok-", i), t0)); err != nil || o != idem.AcquireExisting {
					t.Fatalf("retry %d: %v, %v; want existing", i, o, err)
				}
			}
			if got := h.take(); strings.Contains(got, "hmget") {
				t.Fatalf("retries sent %q: a read that a replica may answer", got)
			}
		})
	}
}
