package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// What the store needs to know of the deployment a client reaches, for the
// two calls that touch more than one record: RenewBatch, which may put the
// keys of many slots in one script only where the server allows it, and
// Purge, which must walk every node holding records. The calls on one
// record need nothing: go-redis routes them.
//
// Which nodes there are is a matter of the client: a Cluster client knows
// its masters, a Ring its shards, and a plain client (Sentinel included)
// talks to one node. The store finds out through the methods the client
// has, not its type, so that a go-redis client wrapped in an
// application's type that embeds it counts as what it wraps; a client
// that offers none of them is refused. Whether the server refuses a
// script with keys of several slots is a matter of the server: a plain
// client may talk to a Cluster node, which does. The store asks it
// (INFO cluster) at the first batch renewal, not in New, which does not
// contact Redis.

// clusterClient is a *redis.ClusterClient, or a type embedding one.
type clusterClient interface {
	Options() *redis.ClusterOptions
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, c *redis.Client) error) error
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
}

// ringClient is a *redis.Ring, or a type embedding one.
type ringClient interface {
	Options() *redis.RingOptions
	ForEachShard(ctx context.Context, fn func(ctx context.Context, c *redis.Client) error) error
}

// nodeClient is a *redis.Client (one node, or Sentinel's master), or a type
// embedding one.
type nodeClient interface {
	Options() *redis.Options
}

// deployment is what Store knows of the deployment its client reaches.
type deployment struct {
	cluster clusterClient // nil unless a Cluster client
	ring    ringClient    // nil unless a Ring
	// clusterNode, for a plain client: 0 not known yet, 1 the server is
	// no Cluster node (one script may hold keys of any slot), 2 it is one
	// (each script holds one key). Set once it is known, never changed.
	clusterNode atomic.Int32
	// replicaReads: the client may send a read-only command to a replica
	// (a Cluster client with ReadOnly, RouteByLatency or RouteRandomly),
	// whose copy of a record can lag the master's. Acquire then never
	// answers from a read of its own (see Store.Acquire).
	replicaReads bool
}

// errUnknownClient is New's refusal of a client whose methods do not say
// what it reaches.
var errUnknownClient = errors.New("pass a go-redis client (*redis.Client, *redis.ClusterClient or *redis.Ring, " +
	"as NewClient, NewFailoverClient, NewClusterClient, NewRing and NewUniversalClient return), " +
	"or a type that embeds one: the store must know which nodes hold its records")

// classify returns what c's methods say of the deployment it reaches, and
// whether c honours its contexts' deadlines (ContextTimeoutEnabled).
func classify(c redis.UniversalClient) (t *deployment, contextTimeouts bool, err error) {
	t = new(deployment)
	switch c := c.(type) {
	case clusterClient:
		t.cluster = c
		o := c.Options()
		t.replicaReads = o.ReadOnly || o.RouteByLatency || o.RouteRandomly
		return t, o.ContextTimeoutEnabled, nil
	case ringClient:
		t.ring = c
		return t, c.Options().ContextTimeoutEnabled, nil
	case nodeClient:
		return t, c.Options().ContextTimeoutEnabled, nil
	}
	return nil, false, fmt.Errorf("redisstore: cannot tell which Redis deployment a %T reaches: %w", c, errUnknownClient)
}

// oneKeyPerScript reports whether each lease of a batch needs a script of
// its own: on a Cluster or a Ring, whose records live on many nodes, and
// on a Cluster node reached by a plain client, which refuses a script
// whose keys are on several slots (CROSSSLOT). For a plain client it asks
// the server once; a server that refuses to say gets a script per lease.
func (s *Store) oneKeyPerScript(ctx context.Context) (bool, error) {
	t := s.topo
	if t.cluster != nil || t.ring != nil {
		return true, nil
	}
	switch t.clusterNode.Load() {
	case 1:
		return false, nil
	case 2:
		return true, nil
	}
	info, err := s.c.Info(ctx, "cluster").Result()
	var refused redis.Error
	switch {
	case errors.As(err, &refused):
		// The server answered, but not this (an ACL without INFO, a
		// proxy): a script per lease works everywhere.
		info = "cluster_enabled:1"
	case err != nil:
		return false, fmt.Errorf("asking whether Redis is a Cluster node (INFO cluster): %w", err)
	}
	node := strings.Contains(info, "cluster_enabled:1")
	if node {
		t.clusterNode.Store(2)
	} else {
		t.clusterNode.Store(1)
	}
	return node, nil
}

// scanner is a node whose keys SCAN walks.
type scanner interface {
	Scan(ctx context.Context, cursor uint64, match string, count int64) *redis.ScanCmd
}

// masters returns the nodes that hold the store's keys: every master of a
// Cluster, every shard of a Ring, or the one node a plain client talks to.
func (s *Store) masters(ctx context.Context) ([]scanner, error) {
	var (
		mu    sync.Mutex // ForEachMaster and ForEachShard call on every node at once
		nodes []scanner
	)
	add := func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, c)
		return nil
	}
	var err error
	switch t := s.topo; {
	case t.cluster != nil:
		err = t.cluster.ForEachMaster(ctx, add)
	case t.ring != nil:
		err = t.ring.ForEachShard(ctx, add)
	default:
		nodes = append(nodes, s.c)
	}
	if err != nil {
		return nil, err
	}
	return nodes, nil
}
