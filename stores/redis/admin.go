package redisstore

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemadmin"
	"github.com/redis/go-redis/v9"
)

// What an operator does with the store's records (package idemadmin): a
// record is found by its scope and key through Key, where redis-cli alone
// finds nothing (the key's name is a digest).

var (
	_ idemadmin.Store   = (*Store)(nil)
	_ idemadmin.Locator = (*Store)(nil)
)

// Locate implements idemadmin.Locator: the record's key.
func (s *Store) Locate(id idem.ID) string { return "key " + s.Key(id) }

// Inspect implements idemadmin.Store: Get, described.
func (s *Store) Inspect(ctx context.Context, id idem.ID) (idemadmin.Info, error) {
	rec, err := s.Get(ctx, id)
	if err != nil {
		return idemadmin.Info{}, err
	}
	return idemadmin.NewInfo(rec, s.Locate(id)), nil
}

// Forget implements idemadmin.Store: Get, then one script that deletes the
// record only if it still has the state and token read.
func (s *Store) Forget(ctx context.Context, id idem.ID, force bool) error {
	rec, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	if rec.State == idem.InFlight && !force {
		return idemadmin.ErrInFlight
	}
	if s.hooks != nil && s.hooks.forgetRead != nil {
		s.hooks.forgetRead()
	}
	n, err := forgetScript.Run(ctx, s.c, []string{s.Key(id)}, strconv.Itoa(int(rec.State)), rec.Token).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: forget: %w", err)
	}
	if n != 1 {
		return idemadmin.ErrChanged
	}
	return nil
}

// statFields are the fields RecordStats reads of each record.
var statFields = []string{"s", "ls", "ln", "es", "en", "cs", "cn", "p"}

// RecordStats implements idemadmin.Store. It walks the store's keys with
// SCAN on every master, as Purge does, reading each record's state, times
// and scope digest in pipelines: its cost grows with the number of
// records. Records written by an earlier version of the store have no
// scope digest: they count under idemadmin.UnknownScope.
func (s *Store) RecordStats(ctx context.Context, now time.Time, topScopes int) (idemadmin.Stats, error) {
	var st idemadmin.Stats
	counts := map[string]int64{}
	nodes, err := s.masters(ctx)
	if err != nil {
		return st, fmt.Errorf("redisstore: stats: %w", err)
	}
	pattern := globEscape(s.prefix) + "{*}"
	for _, node := range nodes {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, pattern, 512).Result()
			if err != nil {
				return st, fmt.Errorf("redisstore: stats: %w", err)
			}
			if err := s.countKeys(ctx, s.ownKeys(keys), now, &st, counts); err != nil {
				return st, fmt.Errorf("redisstore: stats: %w", err)
			}
			if next == 0 {
				break
			}
			cursor = next
		}
	}
	st.TopScopes = idemadmin.TopScopes(counts, topScopes)
	return st, nil
}

// countKeys adds the records of keys to st and counts.
func (s *Store) countKeys(ctx context.Context, keys []string, now time.Time, st *idemadmin.Stats, counts map[string]int64) error {
	cmds := make([]*redis.SliceCmd, len(keys))
	_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HMGet(ctx, k, statFields...)
		}
		return nil
	})
	for _, c := range cmds {
		v, err := c.Result()
		if err != nil {
			return err
		}
		state, _ := v[0].(string)
		if state == "" {
			continue // removed meanwhile
		}
		at := func(i int) time.Time {
			sec, _ := strconv.ParseInt(str(v[i]), 10, 64)
			nsec, _ := strconv.ParseInt(str(v[i+1]), 10, 64)
			return time.Unix(sec, nsec)
		}
		lease, expires, created := at(1), at(3), at(5)
		rec := idem.Record{LeaseUntil: lease, ExpiresAt: expires, State: idem.Completed}
		if state == "1" {
			rec.State = idem.InFlight
			if st.InFlight == 0 || created.Before(st.OldestInFlight) {
				st.OldestInFlight = created
			}
			if st.InFlight == 0 || lease.Before(st.OldestLeaseEnd) {
				st.OldestLeaseEnd = lease
			}
			st.InFlight++
		} else {
			st.Completed++
		}
		if rec.Expired(now) {
			st.Expired++
		}
		scope := idemadmin.UnknownScope
		if p := str(v[7]); len(p) == 32 {
			scope = hex.EncodeToString([]byte(p))
		}
		counts[scope]++
	}
	return nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
