// Package redisstore is an idem.Store keeping idempotency records in Redis,
// for fleets of instances that share one Redis (a single node, Sentinel or
// a Cluster), with Redis expiring the records by itself.
//
//	opt, err := redis.ParseURL("redis://127.0.0.1:6379/0")
//	if err != nil { ... }
//	opt.ContextTimeoutEnabled = true // required: store calls keep their deadlines
//	client := redis.NewClient(opt)
//	defer client.Close()
//	store, err := redisstore.New(client, redisstore.WithPrefix("payments:idem:"))
//	if err != nil { ... }
//	engine := idem.New(idem.Config{Store: store})
//
// Each record is one Redis hash, named by the prefix and, as its Cluster
// hash tag, the SHA-256 of its scope and key (see Store.Key). Every write
// is one atomic round trip: a Lua script that reads the record and writes
// it in one step. Get is a single HMGET, and so is Acquire's first step in
// a storm of retries, which answers a live record without a script (see
// Store.Acquire); RenewBatch renews many leases in one round trip per
// node, each lease atomically.
//
// The scripts compare only times the Engine passes, never Redis's clock,
// and a record's TTL is set from the difference of two such times, so
// Redis removes a record once it has expired and no purger runs. Redis
// cannot commit a record in the same transaction as the business rows: see
// the README for what a Redis crash or failover can lose, and the defence
// that keeps a lost record from causing a second effect.
package redisstore
