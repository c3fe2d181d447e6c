package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemadmin"
	"github.com/idemkit/idemkit/internal/redact"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	"github.com/idemkit/idemkit/stores/gorm/opendb"
	redisstore "github.com/idemkit/idemkit/stores/redis"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// reader is what get and stats need.
type reader interface {
	Inspect(ctx context.Context, id idem.ID) (idemadmin.Info, error)
	RecordStats(ctx context.Context, now time.Time, topScopes int) (idemadmin.Stats, error)
}

// backend is the store an operation runs on.
type backend struct {
	reader reader
	// writer is nil where forget and purge are refused, with refusal.
	writer  idemadmin.Store
	refusal error
	note    string
	close   func()
}

// open opens what cfg names for cfg's operation.
func open(ctx context.Context, cfg config) (backend, error) {
	if cfg.admin != "" {
		u, err := url.Parse(cfg.admin)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return backend{}, fmt.Errorf("-admin must be an http:// or https:// URL of a process's admin endpoint, such as http://127.0.0.1:9091/idemadmin")
		}
		if u.User != nil {
			return backend{}, fmt.Errorf("-admin must not carry a user or password: give the endpoint's token in %s or in the file -admin-token-file names", adminTokenEnv)
		}
		c := idemadmin.NewClient(cfg.admin, cfg.adminToken, &http.Client{})
		return backend{reader: c, writer: c, close: func() {}}, nil
	}
	if strings.HasPrefix(cfg.store, "redis://") || strings.HasPrefix(cfg.store, "rediss://") {
		return openRedis(ctx, cfg)
	}
	return openSQL(ctx, cfg)
}

// openSQL opens a SQL store. On SQLite, get and stats read the file
// without taking its lock (a running process may hold it), and forget and
// purge take the lock as a store does: refused, with the way through the
// process, if it is held.
func openSQL(ctx context.Context, cfg config) (backend, error) {
	kind, err := opendb.KindOf(cfg.store)
	if err != nil {
		return backend{}, err
	}
	label := opendb.Label(cfg.store)
	var opts []gormstore.Option
	if cfg.table != "" {
		opts = append(opts, gormstore.WithTable(cfg.table))
	}
	quiet := &gorm.Config{Logger: logger.Discard}
	readOnly := kind == opendb.SQLite && (cfg.op == "get" || cfg.op == "stats")
	if kind == opendb.SQLite && !readOnly {
		// Opening for writing would create a missing file.
		if _, err := os.Stat(cfg.store); err != nil {
			return backend{}, fmt.Errorf("the SQLite file: %w", err)
		}
	}
	var db *gorm.DB
	if readOnly {
		db, err = opendb.OpenReadOnly(ctx, cfg.store, quiet)
	} else {
		db, err = opendb.OpenContext(ctx, cfg.store, quiet)
	}
	if err != nil {
		return backend{}, fmt.Errorf("open %s: %w", label, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return backend{}, err
	}
	if readOnly {
		r, err := gormstore.NewReader(db, opts...)
		if err != nil {
			sqlDB.Close()
			return backend{}, err
		}
		return backend{reader: r, close: func() { sqlDB.Close() }}, nil
	}
	s, err := gormstore.New(db, append(opts, gormstore.WithPurgeInterval(0))...)
	if errors.Is(err, gormstore.ErrFileHeld) {
		sqlDB.Close()
		return backend{}, fmt.Errorf("%s refused: a running process holds the SQLite file %s (its lock file %s): "+
			"its records in flight live in that process's memory, and it alone writes the file. "+
			"Run %s through that process's admin endpoint instead: idemctl %s -admin http://RECORDS-ADMIN-ADDR/idemadmin ... "+
			"(get and stats work on the file itself)", cfg.op, cfg.store, cfg.store+"-idemkit.lock", cfg.op, cfg.op)
	}
	if err != nil {
		sqlDB.Close()
		return backend{}, err
	}
	return backend{reader: s, writer: s, close: func() { s.Close(); sqlDB.Close() }}, nil
}

// openRedis opens a Redis store: a Cluster client if the node the URL
// names says it is a Cluster node, a node's client otherwise.
func openRedis(ctx context.Context, cfg config) (backend, error) {
	opt, err := redis.ParseURL(cfg.store)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which it quotes whole
		}
		return backend{}, fmt.Errorf("-store %s: %w", redact.DSN(cfg.store), err)
	}
	opt.ContextTimeoutEnabled = true
	opt.DialerRetries = 1
	node := redis.NewClient(opt)
	info, err := node.Info(ctx, "cluster").Result()
	if err != nil {
		node.Close()
		return backend{}, fmt.Errorf("redis at %s: %w", opt.Addr, err)
	}
	var client redis.UniversalClient = node
	if strings.Contains(info, "cluster_enabled:1") {
		node.Close()
		client = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: []string{opt.Addr}, Username: opt.Username, Password: opt.Password,
			TLSConfig: opt.TLSConfig, ContextTimeoutEnabled: true, DialerRetries: 1,
		})
	}
	var opts []redisstore.Option
	if cfg.prefix != "" {
		opts = append(opts, redisstore.WithPrefix(cfg.prefix))
	}
	s, err := redisstore.New(client, opts...)
	if err != nil {
		client.Close()
		return backend{}, err
	}
	return backend{reader: s, writer: s, close: func() { client.Close() }}, nil
}
