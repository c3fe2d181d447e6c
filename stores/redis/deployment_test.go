package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/internal/testservers"
	"github.com/redis/go-redis/v9"
)

// appClient is a Cluster client an application wrapped in a type of its
// own: still a redis.UniversalClient, but not a *redis.ClusterClient.
type appClient struct{ *redis.ClusterClient }

// opaqueClient hides what it wraps: only redis.UniversalClient's methods
// are left.
type opaqueClient struct{ redis.UniversalClient }

// masterAddr returns the address of the master that holds key.
func masterAddr(t *testing.T, cc *redis.ClusterClient, key string) string {
	t.Helper()
	node, err := cc.MasterForKey(testContext(t), key)
	if err != nil {
		t.Fatal(err)
	}
	return node.Options().Addr
}

// onEveryMaster returns n IDs whose records spread over every master of
// cc, at least one on each.
func onEveryMaster(t *testing.T, s *Store, cc *redis.ClusterClient, n int) []idem.ID {
	t.Helper()
	var mu sync.Mutex // ForEachMaster calls on every master at once
	masters := map[string]bool{}
	if err := cc.ForEachMaster(testContext(t), func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		masters[c.Options().Addr] = false
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var ids []idem.ID
	for i := 0; len(ids) < n || !allTrue(masters); i++ {
		id := idem.ID{Scope: "spread", Key: fmt.Sprint("k-", i)}
		masters[masterAddr(t, cc, s.Key(id))] = true
		ids = append(ids, id)
	}
	return ids
}

// renewsAll checks that one batch renews every lease of held, which the
// token "tok" holds, and reports none lost.
func renewsAll(t *testing.T, s *Store, held []idem.Held, how string) {
	t.Helper()
	ctx := testContext(t)
	until := t0.Add(3 * lease)
	lost := make([]bool, len(held))
	if err := s.RenewBatch(ctx, held, until, lost); err != nil {
		t.Fatalf("RenewBatch %s: %v", how, err)
	}
	for i, h := range held {
		if rec, err := s.Get(ctx, h.ID); lost[i] || err != nil || !rec.LeaseUntil.Equal(until) {
			t.Fatalf("RenewBatch %s, lease %d: lost %v, until %v (%v); want renewed until %v", how, i, lost[i], rec.LeaseUntil, err, until)
		}
	}
}

func allTrue(m map[string]bool) bool {
	for _, v := range m {
		if !v {
			return false
		}
	}
	return true
}

// TestWrappedClusterClient: a Cluster client wrapped in the application's
// own type is a Cluster client: a batch renews every lease (one script
// with keys on many slots would fail with CROSSSLOT), and Purge walks
// every master (one master's SCAN would find a third of the records).
func TestWrappedClusterClient(t *testing.T) {
	cc := dialCluster(t).(*redis.ClusterClient)
	s, err := New(appClient{cc}, WithPrefix(testPrefix(t, cc)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	ids := onEveryMaster(t, s, cc, 12)
	held := make([]idem.Held, len(ids))
	for i, id := range ids {
		held[i] = idem.Held{ID: id, Token: "tok"}
		if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
			t.Fatal(err)
		}
	}
	renewsAll(t, s, held, "through the wrapped Cluster client")
	for _, h := range held {
		if err := s.Complete(ctx, h.ID, "tok", idem.Completion{Response: exchange.Response{Status: 201},
			CompletedAt: t0, ExpiresAt: t0.Add(ttl)}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.Purge(ctx, t0.Add(2*ttl), 1000)
	if err != nil || n != len(held) {
		t.Fatalf("Purge through the wrapped Cluster client: %d of %d expired records (%v)", n, len(held), err)
	}
}

// TestUnclassifiableClient: New refuses a client whose deployment it
// cannot tell, saying what to pass instead, and checks the options of a
// wrapped go-redis client as it does those of the client itself.
func TestUnclassifiableClient(t *testing.T) {
	cc := dialCluster(t).(*redis.ClusterClient)
	_, err := New(opaqueClient{cc})
	if err == nil || !strings.Contains(err.Error(), "embeds") {
		t.Fatalf("New with a client that hides its type: %v; want a refusal naming what to pass", err)
	}
	noTimeouts := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cc.Options().Addrs})
	t.Cleanup(func() { _ = noTimeouts.Close() })
	if _, err := New(appClient{noTimeouts}); err == nil || !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
		t.Fatalf("New with a wrapped client without ContextTimeoutEnabled: %v; want a refusal", err)
	}
}

// TestPlainClientOnClusterNode: a plain client talking to one node of a
// Cluster (all the keys it uses live there) reaches a server that refuses
// a script whose keys are on different slots: the store asks the server,
// not the client's type, and renews lease by lease.
func TestPlainClientOnClusterNode(t *testing.T) {
	cc := dialCluster(t).(*redis.ClusterClient)
	addr := strings.Split(testservers.Require(t, testservers.RedisClusterAddrs), ",")[0]
	node := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = node.Close() })
	prefix := testPrefix(t, cc)
	s, err := New(node, WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	var held []idem.Held
	for i := 0; len(held) < 8; i++ {
		id := idem.ID{Key: fmt.Sprint("k-", i)}
		if masterAddr(t, cc, s.Key(id)) != addr {
			continue
		}
		held = append(held, idem.Held{ID: id, Token: "tok"})
		if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
			t.Fatal(err)
		}
	}
	renewsAll(t, s, held, "on a Cluster node through a plain client")
}

// TestPlainClientOnClusterNodeWithoutInfo: a plain client talking to one
// node of a Cluster as a user without INFO. The server refuses to say
// what it is, and must be taken for what refuses scripts whose keys are on
// several slots: a batch of leases on that node, on many slots, is renewed
// whole. (On a node of no Cluster, as in TestRenewBatchWithoutInfo, either
// guess works, so only a Cluster node can tell a wrong one.)
func TestPlainClientOnClusterNodeWithoutInfo(t *testing.T) {
	cc := dialCluster(t).(*redis.ClusterClient)
	addr := strings.Split(testservers.Require(t, testservers.RedisClusterAddrs), ",")[0]
	admin := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := testContext(t)
	user := fmt.Sprint("idemtest-noinfo-", time.Now().UnixNano())
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	node := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: "pw", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = node.Close() })
	if err := node.Info(ctx, "cluster").Err(); err == nil {
		t.Fatal("INFO allowed: the test proves nothing")
	}
	s, err := New(node, WithPrefix(testPrefix(t, cc)))
	if err != nil {
		t.Fatal(err)
	}
	var held []idem.Held
	slots := map[int64]bool{}
	for i := 0; len(held) < 8; i++ {
		id := idem.ID{Key: fmt.Sprint("k-", i)}
		if masterAddr(t, cc, s.Key(id)) != addr {
			continue
		}
		slot, err := cc.ClusterKeySlot(ctx, s.Key(id)).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
		held = append(held, idem.Held{ID: id, Token: "tok"})
		if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
			t.Fatal(err)
		}
	}
	if len(slots) < 2 {
		t.Fatalf("the leases are on %d slot: the test proves nothing", len(slots))
	}
	renewsAll(t, s, held, "on a Cluster node, as a user without INFO")
}

// unrenewed is what RenewBatch's error offers when only some leases
// could not be renewed.
type unrenewed interface {
	Unrenewed(i int) bool
}

// TestRenewBatchOneMasterStalled: one master of the Cluster stops
// answering writes (CLIENT PAUSE: the commands queue until it resumes, as
// on a master that hangs or is cut off). The leases on the other masters
// are renewed and each reported as such, or lost, as lost says; only the
// stalled master's leases are reported unrenewed, through the error.
func TestRenewBatchOneMasterStalled(t *testing.T) {
	cc := dialCluster(t).(*redis.ClusterClient)
	s := newStore(t, cc)
	ctx := testContext(t)
	ids := onEveryMaster(t, s, cc, 30)
	held := make([]idem.Held, len(ids))
	wantLost := make([]bool, len(ids))
	for i, id := range ids {
		held[i] = idem.Held{ID: id, Token: "tok"}
		if wantLost[i] = i%5 == 4; wantLost[i] {
			continue // never acquired
		}
		if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
			t.Fatal(err)
		}
	}
	stalledAddr := masterAddr(t, cc, s.Key(ids[0]))
	stalled, err := cc.MasterForKey(ctx, s.Key(ids[0]))
	if err != nil {
		t.Fatal(err)
	}
	// Bounded: the master resumes by itself if the test dies first.
	if err := stalled.Do(ctx, "CLIENT", "PAUSE", 20000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	unpause := func() { _ = stalled.Do(context.Background(), "CLIENT", "UNPAUSE").Err() }
	t.Cleanup(unpause)

	until := t0.Add(3 * lease)
	lost := make([]bool, len(held))
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	err = s.RenewBatch(rctx, held, until, lost)
	cancel()
	var partial unrenewed
	if !errors.As(err, &partial) {
		t.Fatalf("RenewBatch with one master stalled: %v; want an error telling which leases were not renewed", err)
	}
	onStalled := 0
	for i, h := range held {
		addr := masterAddr(t, cc, s.Key(h.ID))
		if addr == stalledAddr {
			onStalled++
			if !partial.Unrenewed(i) {
				t.Fatalf("lease %d, on the stalled master: reported renewed (lost %v)", i, lost[i])
			}
			continue
		}
		if partial.Unrenewed(i) {
			t.Fatalf("lease %d, on a master that answered: reported unrenewed (%v)", i, err)
		}
		if lost[i] != wantLost[i] {
			t.Fatalf("lease %d: lost = %v, want %v", i, lost[i], wantLost[i])
		}
		if rec, err := s.Get(ctx, h.ID); !wantLost[i] && (err != nil || !rec.LeaseUntil.Equal(until)) {
			t.Fatalf("lease %d: until %v (%v), want renewed until %v", i, rec.LeaseUntil, err, until)
		}
	}
	if onStalled == 0 || onStalled == len(held) {
		t.Fatalf("%d of %d leases on the stalled master: the test proves nothing", onStalled, len(held))
	}
	unpause()
}

// TestRenewBatchWithoutInfo: a server that refuses to say whether it is
// a Cluster node (here an ACL user without INFO) still renews every lease,
// each in a script of its own.
func TestRenewBatchWithoutInfo(t *testing.T) {
	admin := dialSingle(t)
	ctx := testContext(t)
	user := fmt.Sprint("idemtest-noinfo-", time.Now().UnixNano())
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", "-info").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	c := redis.NewClient(&redis.Options{Addr: testservers.Require(t, testservers.RedisAddr), Username: user, Password: "pw", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Info(ctx, "cluster").Err(); err == nil {
		t.Fatal("INFO allowed: the test proves nothing")
	}
	s := newStore(t, c)
	held := make([]idem.Held, 5)
	for i := range held {
		held[i] = idem.Held{ID: idem.ID{Key: fmt.Sprint("k-", i)}, Token: "tok"}
		if _, _, err := s.Acquire(ctx, acquireAt(held[i].ID, "tok", t0)); err != nil {
			t.Fatal(err)
		}
	}
	renewsAll(t, s, held, "without INFO")
}
