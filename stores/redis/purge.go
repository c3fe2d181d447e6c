package redisstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Purge deletes at most limit records expired at now that Redis has not
// removed yet, and returns how many it deleted.
//
// Nothing needs to call it: every record carries a TTL, so Redis removes
// it by itself once it expires (a completed record TTL after its
// completion, an in-flight one when both its TTL and its lease have run
// out), and the store runs no purger. Purge exists for the Store contract
// and for maintenance: it walks the store's keys with SCAN on every
// master, so its cost grows with the number of records, and it should not
// be called on a schedule. Each record it deletes is checked and deleted
// in one script, so a record that a request renewed or replaced meanwhile
// is left alone.
func (s *Store) Purge(ctx context.Context, now time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("redisstore: purge: %w", err)
	}
	if limit <= 0 {
		return 0, nil
	}
	nodes, err := s.masters(ctx)
	if err != nil {
		return 0, fmt.Errorf("redisstore: purge: %w", err)
	}
	pattern := globEscape(s.prefix) + "{*}"
	deleted := 0
	for _, node := range nodes {
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, pattern, 512).Result()
			if err != nil {
				return deleted, fmt.Errorf("redisstore: purge: %w", err)
			}
			keys = s.ownKeys(keys)
			for len(keys) > 0 {
				n := min(len(keys), limit-deleted)
				d, err := s.purgeKeys(ctx, keys[:n], now)
				deleted += d
				if err != nil {
					return deleted, fmt.Errorf("redisstore: purge: %w", err)
				}
				if deleted == limit {
					return deleted, nil
				}
				keys = keys[n:]
			}
			if next == 0 {
				break
			}
			cursor = next
		}
	}
	return deleted, nil
}

// purgeKeys runs purgeScript on keys in one pipeline and returns how many
// it deleted.
func (s *Store) purgeKeys(ctx context.Context, keys []string, now time.Time) (int, error) {
	sec, nsec := now.Unix(), now.Nanosecond()
	cmds := make([]*redis.Cmd, len(keys))
	_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = purgeScript.Eval(ctx, p, []string{k}, sec, nsec)
		}
		return nil
	})
	deleted := 0
	for _, c := range cmds {
		n, err := c.Int64()
		if err != nil {
			return deleted, err
		}
		deleted += int(n)
	}
	return deleted, nil
}

// ownKeys keeps the names that are exactly the shape Key gives (prefix,
// then 64 hex digits in braces): other keys that happen to match the
// pattern are not the store's to touch.
func (s *Store) ownKeys(keys []string) []string {
	own := keys[:0]
	for _, k := range keys {
		rest, ok := strings.CutPrefix(k, s.prefix)
		if !ok || len(rest) != 66 || rest[0] != '{' || rest[65] != '}' {
			continue
		}
		hex := true
		for i := 1; i < 65; i++ {
			if c := rest[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				hex = false
				break
			}
		}
		if hex {
			own = append(own, k)
		}
	}
	return own
}

// globEscape escapes the characters SCAN's MATCH pattern gives a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
