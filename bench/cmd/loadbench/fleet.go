package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit/bench/internal/servers"
)

// fleetKinds returns the configurations on a database server that the run
// measures: on loopback, and among the profiled ones.
func (c config) fleetKinds() []string {
	var ks []string
	add := func(k string) {
		if servers.Fleet(k) && !slices.Contains(ks, k) {
			ks = append(ks, k)
		}
	}
	if c.sections["loopback"] && len(c.fleetWorkloads) > 0 && len(c.fleetConns) > 0 {
		for _, k := range c.kinds {
			for _, fw := range c.frameworks {
				if servers.Valid(fw, k) {
					add(k)
				}
			}
		}
	}
	if c.sections["profile"] && c.profileDir != "" {
		for _, spec := range c.profileConfigs {
			_, k, _ := strings.Cut(spec, "/")
			add(k)
		}
	}
	return ks
}

// fleetServers are the servers the fleet configurations run on.
var fleetServers = []struct {
	env, name, start string
	version          func(ctx context.Context, where string) (string, error)
}{
	{servers.PostgresEnv, "PostgreSQL", "source scripts/servers.sh && start_postgres", postgresVersion},
	{servers.RedisEnv, "Redis", "source scripts/redis-servers.sh && start_redis", redisVersion},
}

// checkFleet makes sure, before anything is measured, that the servers of
// kinds are set and answer: a configuration the user asked for is never
// left out for want of its server. It returns each server's name and
// version, for the report.
func checkFleet(ctx context.Context, kinds []string) ([]string, error) {
	var found []string
	for _, s := range fleetServers {
		var need []string
		for _, k := range kinds {
			if servers.FleetEnv(k) == s.env {
				need = append(need, k)
			}
		}
		if len(need) == 0 {
			continue
		}
		what := fmt.Sprintf("%s (for -kinds %s)", s.name, strings.Join(need, ","))
		where := os.Getenv(s.env)
		if where == "" {
			return nil, fmt.Errorf("%s: %s is not set: run `make bench-quick` or `make bench-full`, which start the servers, "+
				"or `%s` first (or leave those configurations out with -kinds)", what, s.env, s.start)
		}
		vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		v, err := s.version(vctx, where)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s does not answer at %s=%s: %w", what, s.env, where, err)
		}
		found = append(found, s.name+" "+v)
	}
	return found, nil
}

func postgresVersion(ctx context.Context, dsn string) (string, error) {
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return "", err
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	var v string
	err = db.WithContext(ctx).Raw("SHOW server_version").Scan(&v).Error
	return v, err
}

func redisVersion(ctx context.Context, addr string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer c.Close()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "(version unknown)", nil
}
