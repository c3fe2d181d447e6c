// Package gormstore is a durable idem.Store keeping idempotency records in
// one SQL table through GORM, on SQLite, PostgreSQL or MySQL/MariaDB, so that
// records survive restarts and, on PostgreSQL and MySQL, several instances
// of a service share their keys.
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
// A SQLite store serves one process: New locks the file against the
// stores of other processes, and the store reports OneProcess, so the
// Engine takes no lease on it. Its records in flight live in the process's
// memory, so a crash frees every key at once and a new key costs a read and
// one write, its completed record; its statements run on connections of
// its own, opened through sqlitedb, with statements prepared once. On
// PostgreSQL and MySQL a new key costs a read plus an INSERT and a replay a
// single read; the store's calls talk to database/sql directly, so GORM
// callbacks and plugins do not see them. The background purger pauses
// after every batch four times as long as the batch took, sizes its batches
// to half a millisecond on SQLite and checkpoints SQLite's write-ahead log
// itself, so that a backlog of expired records, however large, never holds
// up requests; the README gives the time a backlog takes.
//
// With Tx, a handler's own writes and the stored response commit in one
// transaction: see Tx and WithTxSlot. Package sqlitedb opens SQLite files
// set up for concurrent requests.
package gormstore
