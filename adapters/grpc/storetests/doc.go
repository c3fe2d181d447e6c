// Package storetests runs the gRPC interceptor's conformance suite on the
// durable stores, GORM (SQLite and PostgreSQL) and Redis, and shows one
// charge retried through the client interceptor across a server restart,
// taken once. It is a module of its own, never released, so that the
// adapter's module requires gRPC and nothing else: no database driver
// reaches the build of a program that uses the adapter.
package storetests
