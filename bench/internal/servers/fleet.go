package servers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	idem "github.com/idemkit/idemkit/core"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	redisstore "github.com/idemkit/idemkit/stores/redis"
)

// The environment variables that locate the servers of the fleet kinds:
// the ones the store tests read, which scripts/servers.sh (start_postgres)
// and scripts/redis-servers.sh (start_redis) export.
const (
	PostgresEnv = "IDEMKIT_TEST_POSTGRES_DSN"
	RedisEnv    = "IDEMKIT_TEST_REDIS_ADDR"
)

// DefaultPool is the connection pool of each fleet server, idemkit's and
// its baseline's alike: as many connections as the most concurrent
// requests measured, so that no request waits for the pool, and all of
// them kept open between requests (database/sql keeps 2 idle by default,
// go-redis 10 per P in all, which under load would measure reconnecting).
const DefaultPool = 64

// Fleet reports whether kind runs on a database server of its own, which
// FleetEnv locates.
func Fleet(kind string) bool { return FleetEnv(kind) != "" }

// FleetEnv returns the environment variable that locates kind's server,
// or "" for a kind that needs none.
func FleetEnv(kind string) string {
	switch kind {
	case Postgres, PGInsert, PGTx:
		return PostgresEnv
	case Redis, SetNX:
		return RedisEnv
	}
	return ""
}

// fleetTimeout bounds what Build and Close do on a fleet server: connect,
// create a table, drop one, delete keys.
const fleetTimeout = 30 * time.Second

// namespace returns a name no other server has used: a Build's table or
// key prefix, so that every run starts empty and none sees another's rows.
func namespace() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms
	return "loadbench_" + hex.EncodeToString(b[:])
}

// buildPostgres connects to o.PostgresDSN and, in a table of the server's
// own, puts idemkit's GORM store in front of the handler (Postgres) or has
// the handler INSERT each order (PGInsert), or both, the INSERT in the
// request's transaction (PGTx), in a second table. Close drops the tables.
func (s *Server) buildPostgres(o Options, ords *orders) error {
	if o.PostgresDSN == "" {
		return fmt.Errorf("servers: %s needs PostgreSQL: no DSN (%s)", o.Kind, PostgresEnv)
	}
	db, err := gorm.Open(postgres.Open(o.PostgresDSN), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	pool := o.pool()
	sqlDB.SetMaxOpenConns(pool)
	sqlDB.SetMaxIdleConns(pool)
	s.DB = db
	s.closers = append(s.closers, func() { sqlDB.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), fleetTimeout)
	defer cancel()
	if err := sqlDB.PingContext(ctx); err != nil {
		return fmt.Errorf("servers: PostgreSQL does not answer: %w", err)
	}
	s.Namespace = namespace()
	s.closers = append(s.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), fleetTimeout)
		defer cancel()
		db.WithContext(ctx).Exec(`DROP TABLE IF EXISTS "` + s.Namespace + `"`)
		db.WithContext(ctx).Exec(`DROP TABLE IF EXISTS "` + s.Namespace + `_orders"`)
	})
	if o.Kind != PGInsert {
		if err := s.buildGORM(o, gormstore.WithTable(s.Namespace)); err != nil || o.Kind == Postgres {
			return err
		}
	}
	orders := s.Namespace
	if o.Kind == PGTx {
		orders += "_orders"
	}
	err = db.WithContext(ctx).Exec(`CREATE TABLE "` + orders + `" (
		id BIGSERIAL PRIMARY KEY, item TEXT NOT NULL, quantity INTEGER NOT NULL,
		customer TEXT NOT NULL, note TEXT NOT NULL, created BIGINT NOT NULL)`).Error
	if err != nil {
		return err
	}
	ords.db, ords.insert, ords.tx = db, `INSERT INTO "`+orders+`" `+ordersColumns, o.Kind == PGTx
	return nil
}

// buildRedis connects to o.RedisAddr and, under a key prefix of the
// server's own, puts idemkit's Redis store in front of the handler (Redis)
// or has the handler SET NX a key per order with the expiry the store's
// records get by default (SetNX). Close deletes the prefix's keys.
func (s *Server) buildRedis(o Options, ords *orders) error {
	if o.RedisAddr == "" {
		return fmt.Errorf("servers: %s needs Redis: no address (%s)", o.Kind, RedisEnv)
	}
	c := redis.NewClient(&redis.Options{Addr: o.RedisAddr, PoolSize: o.pool(), ContextTimeoutEnabled: true})
	s.Redis = c
	s.closers = append(s.closers, func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), fleetTimeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("servers: Redis does not answer: %w", err)
	}
	s.Namespace = namespace() + ":"
	s.closers = append(s.closers, func() { deleteKeys(c, s.Namespace) })
	rs, err := redisstore.New(c, redisstore.WithPrefix(s.Namespace))
	if err != nil {
		return err
	}
	e := idem.New(idem.Config{Store: rs})
	if o.Kind == Redis {
		s.Engine = e
		return nil
	}
	ords.rdb, ords.prefix, ords.ttl = c, s.Namespace, e.Config().TTL
	return nil
}

// deleteKeys deletes every key under prefix, which is letters, digits,
// underscores and colons: nothing a SCAN pattern reads as a wildcard.
func deleteKeys(c *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), fleetTimeout)
	defer cancel()
	iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var batch []string
	flush := func() {
		if len(batch) > 0 {
			c.Unlink(ctx, batch...)
			batch = batch[:0]
		}
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 1000 {
			flush()
		}
	}
	flush()
}

func (o Options) pool() int {
	if o.Pool > 0 {
		return o.Pool
	}
	return DefaultPool
}
