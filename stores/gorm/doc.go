// Package gormstore is a durable idem.Store keeping idempotency records in
// one SQL table through GORM, on SQLite, PostgreSQL or MySQL/MariaDB, so that
// several instances of a service share their keys and records survive
// restarts.
//
//	db, _ := gorm.Open(postgres.Open(dsn))
//	store, err := gormstore.New(db)
//	if err != nil { ... }
//	defer store.Close()
//	if err := store.AutoMigrate(ctx); err != nil { ... }
//	engine := idem.New(idem.Config{Store: store})
//
// Every method is one statement, or a few statements each conditional on
// what it expects, never a read followed by an unconditional write; all
// times come from the Engine and are stored as Unix nanoseconds (BIGINT),
// exact and compared alike on every dialect. Records are keyed by the
// SHA-256 of their scope and key, so any byte string of any length is a
// valid scope or key. The store renews many leases in one step
// (idem.BatchRenewer), every call ends by its context's deadline (SQLite
// included), and its statements never reach the GORM logger of the
// *gorm.DB it is given.
//
// A new key costs one statement on SQLite (an upsert) and a read plus an
// INSERT on PostgreSQL and MySQL, where a replay stays a single read (on
// SQLite too while replays outnumber new keys, as in a storm); the
// store's calls talk to database/sql directly, so GORM callbacks and
// plugins do not see them. The background purger pauses after every batch
// four times as long as the batch took, sizes its batches to about a
// millisecond on SQLite and checkpoints SQLite's write-ahead log itself,
// so that a backlog of expired records, however large, never holds up
// requests; the README gives the time a backlog takes.
//
// With Tx, a handler's own writes and the stored response commit in one
// transaction: see Tx and WithTxSlot. Package sqlitedb opens SQLite files
// set up for concurrent requests.
package gormstore
