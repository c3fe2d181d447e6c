// Package idem is the core of idemkit: a framework-agnostic state machine
// that makes non-idempotent HTTP requests (POST, PATCH) safe to retry,
// following the IETF Idempotency-Key header draft.
//
// An adapter (package idemhttp for net/http; Gin, Echo, Fiber and gRPC in
// modules of their own) hands every guarded request to the Engine, which
// decides:
//
//   - first request with a key: the key is locked (an in-flight record with
//     a lease and an owner token) and the handler runs; its response is
//     captured and stored for replay, or the key is released for
//     responses that must not be replayed (5xx, 408, 409, 425, 429, panics,
//     streams, oversized bodies);
//   - retry of a completed request: the stored response is replayed;
//   - retry while the first still runs: 409 problem with Retry-After;
//   - same key, other method, path or body: 422 problem;
//   - missing or malformed key: 400 problem; body too large: 413 problem;
//   - store unreachable: 503 problem (or pass-through with Config.FailOpen);
//   - expired key, or a holder whose lease ran out: treated as new.
//
// The Engine holds no mutex or transaction while a handler runs; the
// in-flight record is the lock, renewed while the handler runs, and every
// write after acquisition is conditional on the owner token (fencing).
//
// Users mount an adapter rather than calling the Engine, and run jobs and
// event handlers once per key with [Engine.Do]:
//
//	engine := idem.New(idem.Config{Store: memstore.New()})
//	handler := idemhttp.Middleware(engine)(mux)
//
// Stores implement [Store]; package idemtest holds the conformance suites
// every store and adapter runs. Adapter authors find what the Engine and an
// adapter say to each other in package exchange ([Engine.Adapter]), and
// what it reports as it works in package idemevent.
package idem
