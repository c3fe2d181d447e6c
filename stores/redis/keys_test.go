package redisstore

import (
	"errors"
	"strings"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/redis/go-redis/v9"
)

// hostileIDs are scopes and keys the Engine may pass: any bytes, any
// length, braces that would otherwise pick the Cluster hash tag, glob and
// separator characters, and pairs that would run together if scope and key
// were simply joined.
var hostileIDs = []idem.ID{
	{Scope: "", Key: "plain"},
	{Scope: "a", Key: "bc"},
	{Scope: "ab", Key: "c"},
	{Scope: "abc", Key: ""},
	{Scope: "{tag}", Key: "k"},
	{Scope: "t", Key: "{}"},
	{Scope: "}", Key: "{"},
	{Scope: "*", Key: "?[a-z]\\"},
	{Scope: "acct:1", Key: "k:2"},
	{Scope: "acct", Key: "1:k:2"},
	{Scope: "\xff\xfe", Key: "\x00\x01\x80 not utf-8 \xc3\x28"},
	{Scope: "ünïcødé", Key: "ключ"},
	{Scope: strings.Repeat("s", 4096), Key: strings.Repeat("k", 255)},
	{Scope: "t", Key: strings.Repeat("x", 1<<16)},
}

// TestKeysAnyBytes: every hostile ID gets a record of its own, found by
// Get, under a key name of the store's fixed shape that never holds the
// scope or key in clear.
func TestKeysAnyBytes(t *testing.T) {
	for _, top := range topologies {
		t.Run(top.name, func(t *testing.T) {
			c := top.dial(t)
			s := newStore(t, c)
			ctx := testContext(t)
			names := map[string]idem.ID{}
			for i, id := range hostileIDs {
				name := s.Key(id)
				if prev, ok := names[name]; ok {
					t.Fatalf("IDs %q and %q share the key name %s", prev, id, name)
				}
				names[name] = id
				if own := s.ownKeys([]string{name}); len(own) != 1 {
					t.Fatalf("key name %q does not have the store's shape", name)
				}
				if len(id.Key) > 3 && strings.Contains(name, id.Key) {
					t.Fatalf("key name %q holds the key in clear", name)
				}
				token := "tok-" + string(rune('a'+i))
				if _, o, err := s.Acquire(ctx, acquireAt(id, token, t0)); err != nil || o != idem.AcquireCreated {
					t.Fatalf("Acquire(%.40q) = %v, %v; want created", id, o, err)
				}
			}
			for i, id := range hostileIDs {
				rec, err := s.Get(ctx, id)
				if err != nil {
					t.Fatalf("Get(%.40q): %v", id, err)
				}
				if want := "tok-" + string(rune('a'+i)); rec.Token != want || rec.ID != id {
					t.Fatalf("Get(%.40q) = token %q, id %.40q; want %q", id, rec.Token, rec.ID, want)
				}
			}
			// Exactly one Redis key per record, each where Key says.
			n := 0
			for name := range names {
				if c.Exists(ctx, name).Val() != 1 {
					t.Fatalf("no key %s", name)
				}
				n++
			}
			if got := countKeys(t, c, s.prefix); got != n {
				t.Fatalf("%d keys under the prefix, want %d", got, n)
			}
		})
	}
}

// countKeys counts the keys under prefix on every master.
func countKeys(tb testing.TB, c redis.UniversalClient, prefix string) int {
	tb.Helper()
	ctx := testContext(tb)
	s, err := New(c, WithPrefix(prefix))
	if err != nil {
		tb.Fatal(err)
	}
	nodes, err := s.masters(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, node := range nodes {
		iter := node.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
		for iter.Next(ctx) {
			n++
		}
		if err := iter.Err(); err != nil {
			tb.Fatal(err)
		}
	}
	return n
}

// TestKeysSpreadOverSlots: the hash tag is the record's own digest, so the
// records of one tenant spread over the Cluster's masters instead of
// piling onto one slot.
func TestKeysSpreadOverSlots(t *testing.T) {
	c := redis.NewClient(&redis.Options{ContextTimeoutEnabled: true})
	defer c.Close()
	s, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	slots := map[int]bool{}
	for i := range 64 {
		slots[hashSlot(s.Key(idem.ID{Scope: "one-tenant", Key: string(rune('a' + i))}))] = true
	}
	if len(slots) < 60 {
		t.Fatalf("64 keys of one tenant fall on %d slots", len(slots))
	}
	// The braces of a scope or key never choose the slot.
	a := hashSlot(s.Key(idem.ID{Scope: "{x}", Key: "1"}))
	b := hashSlot(s.Key(idem.ID{Scope: "{x}", Key: "2"}))
	if a == b {
		t.Fatalf("two keys with the scope {x} share slot %d", a)
	}
}

// hashSlot is Redis Cluster's slot of a key name: CRC16 of its hash tag.
func hashSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// TestHashSlotMatchesRedis checks hashSlot against the Cluster itself, so
// TestKeysSpreadOverSlots measures what Redis does.
func TestHashSlotMatchesRedis(t *testing.T) {
	c := dialCluster(t).(*redis.ClusterClient)
	ctx := testContext(t)
	s, _ := New(c)
	for _, id := range hostileIDs[:6] {
		name := s.Key(id)
		want, err := c.ClusterKeySlot(ctx, name).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := hashSlot(name); got != int(want) {
			t.Fatalf("hashSlot(%s) = %d, Redis says %d", name, got, want)
		}
	}
}

// TestPrefixesApart: stores with different prefixes on one Redis never
// see each other's records.
func TestPrefixesApart(t *testing.T) {
	c := dialSingle(t)
	ctx := testContext(t)
	a, b := newStore(t, c), newStore(t, c)
	id := idem.ID{Scope: "s", Key: "shared"}
	if _, o, err := a.Acquire(ctx, acquireAt(id, "tok-a", t0)); err != nil || o != idem.AcquireCreated {
		t.Fatalf("a: %v %v", o, err)
	}
	if _, err := b.Get(ctx, id); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("b sees a's record: %v", err)
	}
	if _, o, err := b.Acquire(ctx, acquireAt(id, "tok-b", t0)); err != nil || o != idem.AcquireCreated {
		t.Fatalf("b: %v %v", o, err)
	}
}

// TestNewRefuses: misuse is an error at construction, not a failure later.
func TestNewRefuses(t *testing.T) {
	if _, err := New(nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	for _, c := range []redis.UniversalClient{
		redis.NewClient(&redis.Options{}),
		redis.NewClusterClient(&redis.ClusterOptions{}),
		redis.NewRing(&redis.RingOptions{}),
		redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"a:1", "b:1"}}),
		redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"a:1"}}),
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%T without ContextTimeoutEnabled) succeeded", c)
		}
		_ = c.Close()
	}
	c := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{"a:1", "b:1"}, ContextTimeoutEnabled: true})
	defer c.Close()
	for _, p := range []string{"app{x}:", "}", "{"} {
		if _, err := New(c, WithPrefix(p)); err == nil {
			t.Fatalf("New with prefix %q succeeded", p)
		}
	}
	for _, p := range []string{"", "app:", "a*b?[c]\\:"} {
		if _, err := New(c, WithPrefix(p)); err != nil {
			t.Fatalf("New with prefix %q: %v", p, err)
		}
	}
}

// TestOwnKeys: Purge touches only key names of the store's own shape.
func TestOwnKeys(t *testing.T) {
	s := &Store{prefix: "p:"}
	good := s.Key(idem.ID{Key: "k"})
	in := []string{good, "p:{zz}", "p:other", "q:" + good[2:], good + "x", "p:{" + strings.Repeat("G", 64) + "}"}
	if got := s.ownKeys(in); len(got) != 1 || got[0] != good {
		t.Fatalf("ownKeys = %q, want only %q", got, good)
	}
}
