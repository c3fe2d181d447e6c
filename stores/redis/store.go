package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/internal/acquireorder"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix begins the name of every key the store writes, unless
// WithPrefix says otherwise.
const DefaultPrefix = "idem:"

// Store is an idem.Store keeping records in Redis: one hash per record,
// written by Lua scripts, each one atomic round trip, and removed by Redis
// itself when its TTL runs out. It works on go-redis's clients, or types
// that embed one: a single node, Sentinel, a Cluster or a Ring. The caller
// owns the client and closes it; the store starts no goroutine and needs
// no Close.
type Store struct {
	c      redis.UniversalClient
	prefix string
	topo   *deployment
	// order says whether Acquire reads the record before it runs its
	// script (see Acquire).
	order acquireorder.Order
	// hooks, if set, are the tests' (a pointer, so that a Store stays
	// comparable).
	hooks *testHooks
}

// testHooks are places where a test acts inside a call.
type testHooks struct {
	// forgetRead runs in Forget between its read and its delete: a
	// record changed meanwhile.
	forgetRead func()
}

var (
	_ idem.Store        = (*Store)(nil)
	_ idem.BatchRenewer = (*Store)(nil)
)

// Option configures a Store.
type Option func(*options)

type options struct {
	prefix string
}

// WithPrefix sets the text every key name begins with (default
// DefaultPrefix), so that several applications, or several stores of one,
// share a Redis without meeting. It may not contain '{' or '}': the part of
// a key name in braces is its Cluster hash tag, which the store sets itself.
func WithPrefix(p string) Option {
	return func(o *options) { o.prefix = p }
}

// New returns a Store on c. It does not contact Redis.
//
// c must be a client of go-redis's own (*redis.Client, *redis.ClusterClient
// or *redis.Ring, as NewClient, NewFailoverClient, NewClusterClient, NewRing
// and NewUniversalClient return), or a type that embeds one: the store
// finds the nodes that hold its records through the client's methods
// (ForEachMaster, ForEachShard), so that a Cluster client in a wrapper of
// the application's counts as a Cluster client. New refuses a client that
// offers none of them, which could reach a Cluster or a Ring the store
// would take for one node. Whether the server is a Cluster node is asked of
// the server itself, at the first batch renewal (see RenewBatch).
//
// c must have ContextTimeoutEnabled set (in redis.Options, ClusterOptions,
// FailoverOptions, RingOptions or UniversalOptions): without it go-redis
// lets a command wait for its own read timeout, retries included, however
// soon the context's deadline falls, and a Redis that stops answering
// would hold requests and lease renewals well past the Engine's
// StoreTimeout. New refuses such a client.
func New(c redis.UniversalClient, opts ...Option) (*Store, error) {
	if c == nil {
		return nil, errors.New("redisstore: nil redis client")
	}
	topo, enabled, err := classify(c)
	if err != nil {
		return nil, err
	}
	if !enabled {
		return nil, errors.New("redisstore: the redis client needs ContextTimeoutEnabled: true, so that every store call keeps the deadline of its context")
	}
	o := options{prefix: DefaultPrefix}
	for _, opt := range opts {
		opt(&o)
	}
	if strings.ContainsAny(o.prefix, "{}") {
		return nil, fmt.Errorf("redisstore: key prefix %q contains a brace, which would change the keys' Cluster hash tag", o.prefix)
	}
	return &Store{c: c, prefix: o.prefix, topo: topo}, nil
}

// Key returns the name of the Redis key that holds id's record: the
// prefix, then, as the hash tag, the hex SHA-256 of the scope and the key
// (the scope's length first, so that no two IDs share an input). Any
// bytes of any length are safe in a scope or key: none reaches the key
// space as such, and none is ever written in clear. The hash tag puts all
// of a record on one Cluster slot; records spread over all the slots.
func (s *Store) Key(id idem.ID) string {
	buf := make([]byte, 0, binary.MaxVarintLen64+len(id.Scope)+len(id.Key))
	buf = binary.AppendUvarint(buf, uint64(len(id.Scope)))
	buf = append(buf, id.Scope...)
	buf = append(buf, id.Key...)
	sum := sha256.Sum256(buf)
	name := make([]byte, 0, len(s.prefix)+2+hex.EncodedLen(len(sum)))
	name = append(name, s.prefix...)
	name = append(name, '{')
	name = hex.AppendEncode(name, sum[:])
	name = append(name, '}')
	return string(name)
}

// Acquire implements idem.Store with one script: the decision and the
// write are one atomic step on the record's slot.
//
// While replays and 409s are lately more common than new keys (a storm of
// retries), it first reads the record with a plain HMGET, which costs
// Redis a fraction of a script's run, and answers a live record from that
// read alone; only a key it may take runs the script, which decides again.
// Otherwise the script comes first, and a new key is one round trip. A
// Cluster client that reads from replicas (ReadOnly, RouteByLatency,
// RouteRandomly) always runs the script, on the master: a replica's copy
// of a record may lag, and a replay must never come from a record the
// master has already replaced.
func (s *Store) Acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, 0, fmt.Errorf("redisstore: acquire: %w", err)
	}
	if !s.topo.replicaReads && s.order.ReadFirst() {
		rec, err := s.read(ctx, "acquire", a.ID)
		switch {
		case err == nil && live(&rec, a):
			s.order.Saw(true)
			return rec, idem.AcquireExisting, nil
		case err != nil && !errors.Is(err, idem.ErrNotFound):
			return idem.Record{}, 0, err
		}
	}
	rec, outcome, err := s.acquire(ctx, a)
	if err == nil {
		s.order.Saw(outcome == idem.AcquireExisting)
	}
	return rec, outcome, err
}

// live reports whether rec is a record that a's acquisition cannot take,
// as acquireScript decides: neither expired nor an in-flight record of the
// same request whose lease has lapsed. A record that a's own token holds
// is left to the script too, which answers such an acquisition run again
// with what the first run did.
func live(rec *idem.Record, a idem.Acquire) bool {
	if rec.Expired(a.Now) || rec.State == idem.InFlight && rec.Token == a.Token {
		return false
	}
	lapsed := rec.State == idem.InFlight && !a.Now.Before(rec.LeaseUntil)
	return !lapsed || rec.Fingerprint != a.Fingerprint
}

// acquire runs acquireScript.
func (s *Store) acquire(ctx context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	ttl := ttlMillis(later(a.ExpiresAt, a.LeaseUntil), a.Now)
	scope := sha256.Sum256([]byte(a.ID.Scope))
	res, err := acquireScript.Run(ctx, s.c, []string{s.Key(a.ID)},
		a.Fingerprint[:], a.Token,
		a.Now.Unix(), a.Now.Nanosecond(),
		a.LeaseUntil.Unix(), a.LeaseUntil.Nanosecond(),
		a.ExpiresAt.Unix(), a.ExpiresAt.Nanosecond(),
		ttl, scope[:]).Slice()
	if err != nil {
		return idem.Record{}, 0, fmt.Errorf("redisstore: acquire: %w", err)
	}
	var outcome int64 = -1
	if len(res) > 0 {
		outcome, _ = res[0].(int64)
	}
	switch {
	case outcome == 1 || outcome == 2:
		o := idem.AcquireCreated
		if outcome == 2 {
			o = idem.AcquireTookOver
		}
		return idem.Record{
			ID: a.ID, Fingerprint: a.Fingerprint, State: idem.InFlight, Token: a.Token,
			LeaseUntil: a.LeaseUntil, ExpiresAt: a.ExpiresAt, CreatedAt: a.Now,
		}, o, nil
	case outcome == 0 && len(res) == 1+len(recordFields):
		rec, err := decodeRecord(a.ID, res[1:])
		if err != nil {
			return idem.Record{}, 0, err
		}
		return rec, idem.AcquireExisting, nil
	}
	return idem.Record{}, 0, fmt.Errorf("redisstore: acquire: unexpected reply of %d values", len(res))
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Renew implements idem.Store with one script.
func (s *Store) Renew(ctx context.Context, id idem.ID, token string, leaseUntil time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: renew: %w", err)
	}
	n, err := renewScript.Run(ctx, s.c, []string{s.Key(id)}, token, leaseUntil.Unix(), leaseUntil.Nanosecond()).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: renew: %w", err)
	}
	if n != 1 {
		return idem.ErrLockLost
	}
	return nil
}

// Complete implements idem.Store with one script. The response is copied
// into the script's argument before it is sent.
func (s *Store) Complete(ctx context.Context, id idem.ID, token string, c idem.Completion) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: complete: %w", err)
	}
	n, err := completeScript.Run(ctx, s.c, []string{s.Key(id)}, token, encodeResponse(c.Response),
		c.CompletedAt.Unix(), c.CompletedAt.Nanosecond(),
		c.ExpiresAt.Unix(), c.ExpiresAt.Nanosecond(),
		ttlMillis(c.ExpiresAt, c.CompletedAt)).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: complete: %w", err)
	}
	if n != 1 {
		return idem.ErrLockLost
	}
	return nil
}

// Release implements idem.Store with one script.
func (s *Store) Release(ctx context.Context, id idem.ID, token string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redisstore: release: %w", err)
	}
	n, err := releaseScript.Run(ctx, s.c, []string{s.Key(id)}, token).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: release: %w", err)
	}
	if n != 1 {
		return idem.ErrLockLost
	}
	return nil
}

// Get implements idem.Store with one HMGET. A record Redis has removed
// for its TTL is not found; one whose expiry has passed by the Engine's
// clock but not yet by Redis's TTL is returned, expired, as the contract
// allows.
func (s *Store) Get(ctx context.Context, id idem.ID) (idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return idem.Record{}, fmt.Errorf("redisstore: get: %w", err)
	}
	return s.read(ctx, "get", id)
}

// read is Get's HMGET, for the store call op.
func (s *Store) read(ctx context.Context, op string, id idem.ID) (idem.Record, error) {
	v, err := s.c.HMGet(ctx, s.Key(id), recordFields...).Result()
	if err != nil {
		return idem.Record{}, fmt.Errorf("redisstore: %s: %w", op, err)
	}
	return decodeRecord(id, v)
}
