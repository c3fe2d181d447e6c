package idem

import (
	"context"
	"time"

	"github.com/idemkit/idemkit/core/exchange"
)

// Store persists idempotency records. Implementations must make every method
// a single atomic step (one statement, script or transaction): the Engine's
// guarantees rest on it, and it never reads a record and then writes it in a
// separate step.
//
// Stores never consult a clock of their own: every time they compare against
// is passed in by the Engine, so all instances sharing a store agree on the
// rules and tests can move time freely.
//
// Errors: the named errors below are outcomes; any other error is a system
// error (store unreachable, timeout, cancelled context), which the Engine
// treats as "store unavailable".
//
// Optional capabilities, each a declared interface the Engine looks for:
// LocalStore, OneProcessStore and BatchRenewer.
//
// Memory: Complete must copy whatever it keeps of the exchange.Response it receives,
// as the Engine reuses that memory once Complete returns. Records a store
// returns are read-only for the caller, so a store may share their slices
// between callers.
type Store interface {
	// Acquire creates an in-flight record for a.ID holding a.Token, unless a
	// live record already holds the ID. Atomically:
	//   - no record, or an expired one (Record.Expired(a.Now)): write a fresh
	//     in-flight record and return it with Created;
	//   - an in-flight record whose lease ran out (LeaseUntil <= a.Now) and
	//     whose Fingerprint equals a.Fingerprint: replace its token, lease and
	//     CreatedAt and return it with TookOver (its ExpiresAt is also reset);
	//   - otherwise leave the record untouched and return it with Existing.
	// A holder that lost its lease to a request with another fingerprint keeps
	// the record: a key reused with another payload is never taken over.
	Acquire(ctx context.Context, a Acquire) (Record, AcquireOutcome, error)

	// Renew moves the lease of the in-flight record held by token to
	// leaseUntil, unless the lease already ends later: a lease never moves
	// back, so a renewal that lands after a newer one (its caller gave up on
	// it) cannot shorten what the newer one granted. It returns ErrLockLost
	// when no in-flight record for id holds token (taken over, completed,
	// released or purged).
	Renew(ctx context.Context, id ID, token string, leaseUntil time.Time) error

	// Complete turns the in-flight record held by token into a completed
	// record carrying c. It returns ErrLockLost, and changes nothing, when no
	// in-flight record for id holds token: this fencing keeps a holder whose
	// lease was taken over from overwriting its successor's record.
	Complete(ctx context.Context, id ID, token string, c Completion) error

	// Release deletes the in-flight record held by token so that a retry runs
	// the handler again. It returns ErrLockLost, and deletes nothing, when no
	// in-flight record for id holds token. A store whose completion commits
	// the handler's own writes (the GORM store's transaction slot) rolls
	// them back here, and then says so: its error wraps ErrRolledBack,
	// alone if the record was deleted, so that the Engine withholds a
	// response that reports work now undone.
	Release(ctx context.Context, id ID, token string) error

	// Get returns the record stored for id, expired or not, or ErrNotFound.
	Get(ctx context.Context, id ID) (Record, error)

	// Purge deletes at most limit records that are expired at now and
	// returns how many it deleted. Callers loop until it returns fewer than
	// limit; a bounded batch keeps any lock it takes short.
	Purge(ctx context.Context, now time.Time, limit int) (int, error)
}

// Held names an in-flight record and the owner token that holds it.
type Held struct {
	ID    ID
	Token string
}

// BatchRenewer is an optional capability of a Store: renewing the leases of
// many in-flight records in one atomic step (one statement, script or
// transaction), so that the cost of a renewal pass does not grow with the
// number of running handlers times the store's latency. The Engine uses it
// when its Store implements it, and otherwise calls Renew for each lease,
// a bounded number at a time.
type BatchRenewer interface {
	// RenewBatch moves to leaseUntil (never back, as Renew) the lease of
	// every in-flight record that held[i].Token holds, and sets lost[i] (len(lost) == len(held))
	// for each held[i] whose token no longer holds an in-flight record
	// for its ID, exactly as Renew would return ErrLockLost for it. An
	// error is a system error: then the Engine assumes nothing was renewed
	// and ignores lost, unless the error is a PartialRenewal.
	RenewBatch(ctx context.Context, held []Held, leaseUntil time.Time, lost []bool) error
}

// PartialRenewal is an error RenewBatch may return when only some of its
// leases could not be renewed (a store spread over nodes, one of which
// failed): for every i where Unrenewed(i) is false, lost[i] is set as if
// RenewBatch had returned nil, so the Engine keeps the leases the healthy
// nodes renewed and tells only the others' handlers.
type PartialRenewal interface {
	error
	Unrenewed(i int) bool
}

// LocalStore is an optional capability of a Store whose calls run in the
// caller's process and never wait for I/O or for other requests beyond a
// short lock (the memory store). The Engine calls such a store without a
// deadline: a deadline could never fire there, and would cost a context
// and a timer on every call. And it takes no leases there: a record of a
// local store lives and dies with the process whose handlers hold its
// keys, so no other process can be waiting to take a key over, and a
// crash frees every key at once. The in-flight record is the lock until
// the handler ends (or Config.HandlerTimeout stops it), with no renewal
// and no lease timer. A wrapper that can wait (a decorator adding latency
// or a network hop) must not pass the capability on, as embedding the
// concrete store type would. With the system clock, the times the Engine
// hands such a store (Acquire.Now, Completion.CompletedAt, ...) are read
// from the monotonic clock, as the Engine's start plus the time elapsed
// since: compare them with each other or with time.Now (which uses the
// monotonic readings), not by their wall readings, which drift from the
// wall clock if it is stepped while the process runs.
type LocalStore interface {
	// Local marks the capability; it is never called.
	Local()
}

// OneProcessStore is an optional capability of a Store that can tell
// whether only one process uses its records at a time (it refuses a second
// one, as the GORM store does on SQLite). When OneProcess reports true the
// Engine takes no leases on it, as on a LocalStore, but keeps its calls'
// deadlines; and such a store must free, when it starts, the in-flight
// records a process that died left behind, since no lease will ever run
// out on them.
type OneProcessStore interface {
	Store
	// OneProcess reports whether only one process uses the records; New
	// asks it once.
	OneProcess() bool
}

// ID names a record: the key is only unique within its scope (tenant), so two
// tenants using the same key never see each other's records.
type ID struct {
	Scope string
	Key   string
}

// State is where a record is in its life.
type State uint8

const (
	// InFlight: a request holds the key and its handler is running.
	InFlight State = iota + 1
	// Completed: the handler finished and its response is stored for replay.
	Completed
)

// String returns the lower-case name of the state.
func (s State) String() string {
	switch s {
	case InFlight:
		return "in-flight"
	case Completed:
		return "completed"
	}
	return "unknown"
}

// Record is what a store keeps per ID.
type Record struct {
	ID          ID
	Fingerprint Fingerprint
	State       State
	// Token identifies the current holder of an in-flight record (fencing).
	Token string
	// LeaseUntil is when an in-flight holder that stopped renewing loses the key.
	LeaseUntil time.Time
	// ExpiresAt is when the record stops counting: TTL after completion, and
	// TTL after acquisition for a record that never completed.
	ExpiresAt   time.Time
	CreatedAt   time.Time
	CompletedAt time.Time
	// Response is set on completed records.
	Response exchange.Response
}

// Expired reports whether the record no longer holds its key at now. An
// in-flight record whose holder still renews its lease never expires under
// it, however long its handler runs.
func (r *Record) Expired(now time.Time) bool {
	if now.Before(r.ExpiresAt) {
		return false
	}
	return r.State == Completed || !now.Before(r.LeaseUntil)
}

// Acquire is the argument of Store.Acquire.
type Acquire struct {
	ID          ID
	Fingerprint Fingerprint
	Token       string
	Now         time.Time
	LeaseUntil  time.Time
	ExpiresAt   time.Time
}

// AcquireOutcome says what Store.Acquire did.
type AcquireOutcome uint8

const (
	// AcquireExisting: a live record holds the ID; the returned record is
	// that one, unchanged.
	AcquireExisting AcquireOutcome = iota
	// AcquireCreated: the caller now holds a new in-flight record.
	AcquireCreated
	// AcquireTookOver: the caller now holds an in-flight record whose
	// previous holder's lease had run out.
	AcquireTookOver
)

// String returns the lower-case name of the outcome.
func (o AcquireOutcome) String() string {
	switch o {
	case AcquireExisting:
		return "existing"
	case AcquireCreated:
		return "created"
	case AcquireTookOver:
		return "took-over"
	}
	return "unknown"
}

// Completion is the argument of Store.Complete.
type Completion struct {
	Response    exchange.Response
	CompletedAt time.Time
	ExpiresAt   time.Time
}
