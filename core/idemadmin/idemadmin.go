// Package idemadmin is what an operator needs to answer "what happened to
// key K of tenant A?" on a store that keeps only digests of its scopes and
// keys: the shapes of a record's description (Info) and of a store's
// counts (Stats), the interface a store implements to be inspected
// (Store), and an HTTP handler serving it as JSON (Handler), for an admin
// listener. The command idemctl (module cmd/idemctl) speaks to a store
// through its DSN, or to a running process through that handler.
//
// Scopes and keys are never written anywhere by this package: they travel
// in request bodies, never in URLs (which access logs keep), and a record
// is described by its state, times and digests. A scope appears in counts,
// and in the handler's audit lines, by a keyed hash (ScopeLabel), never by
// its digest, which a guessed scope could be checked against.
package idemadmin

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// Store is what a store implements to be inspected and repaired by an
// operator. The memory store, the GORM store and the Redis store do.
type Store interface {
	// Inspect describes the record of id, expired or not, with its
	// response body; idem.ErrNotFound if there is none.
	Inspect(ctx context.Context, id idem.ID) (Info, error)
	// Forget deletes the record of id so that its key runs anew. It reads
	// the record, then deletes it in one conditional step that finds it
	// still in the state and held by the token it read, or returns
	// ErrChanged. A record in flight is deleted only with force, and then
	// only the holder that was read loses it: its later Complete, Renew
	// or Release fails with idem.ErrLockLost (fencing), so it never
	// overwrites a record written after. Without force it returns
	// ErrInFlight. A record that does not exist gives idem.ErrNotFound.
	Forget(ctx context.Context, id idem.ID, force bool) error
	// RecordStats counts the store's records at now (the Engine's clock):
	// by state, those expired and waiting for the purge, and the topScopes
	// scopes holding the most. It reads every record, so it is meant for
	// an operator, not for a schedule.
	RecordStats(ctx context.Context, now time.Time, topScopes int) (Stats, error)
	// Purge deletes at most limit records expired at now, as
	// idem.Store.Purge.
	Purge(ctx context.Context, now time.Time, limit int) (int, error)
}

// Locator is implemented by stores that can say where they keep, or would
// keep, the record of an ID, by digests only (the table and its key
// columns, the Redis key): what Info.Location says of a record found. A
// search that finds nothing says where it looked (NotFoundError).
type Locator interface {
	Locate(id idem.ID) string
}

// Locate is s's Locate of id if s is a Locator, else "".
func Locate(s any, id idem.ID) string {
	if l, ok := s.(Locator); ok {
		return l.Locate(id)
	}
	return ""
}

// NotFoundError is the Client's error for a record that does not exist,
// with where the store looked for it, if it said. It matches
// idem.ErrNotFound.
type NotFoundError struct {
	Location string
}

func (e *NotFoundError) Error() string {
	if e.Location == "" {
		return idem.ErrNotFound.Error()
	}
	return idem.ErrNotFound.Error() + " (looked up: " + e.Location + ")"
}

// Is makes errors.Is(err, idem.ErrNotFound) true.
func (e *NotFoundError) Is(target error) bool { return target == idem.ErrNotFound }

// ErrInFlight is Forget's refusal of a record in flight without force.
var ErrInFlight = errors.New("idemadmin: the record is in flight: its handler may be running; forget it with force only if that holder is gone")

// ErrChanged is Forget's answer when the record changed between its read
// and its delete (it completed, was taken over, or was forgotten):
// nothing was deleted; inspect it again.
var ErrChanged = errors.New("idemadmin: the record changed meanwhile; nothing was deleted")

// Info describes one record, without its scope and key.
type Info struct {
	// State is "in-flight" or "completed".
	State string `json:"state"`
	// Expired: the record no longer holds its key (idem.Record.Expired)
	// at the time of the caller's clock (ExpiredAt), and waits for the
	// purge. Stores leave it false: they consult no clock.
	Expired bool `json:"expired"`
	// Fingerprint is the hex SHA-256 of the request's method, path and
	// payload.
	Fingerprint string    `json:"fingerprint"`
	CreatedAt   time.Time `json:"created_at"`
	CompletedAt time.Time `json:"completed_at,omitzero"`
	ExpiresAt   time.Time `json:"expires_at"`
	// LeaseToken and LeaseUntil are the holder of a record in flight and
	// the end of its lease; empty on a completed record. NoLease says that
	// the store takes no leases (a SQLite file, the memory store: one
	// process holds every key until its handler ends, see Leaseless):
	// LeaseUntil is then empty.
	LeaseToken string    `json:"lease_token,omitempty"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	NoLease    bool      `json:"no_lease,omitempty"`
	// Status, HeaderNames and BodySize describe a completed record's
	// stored response.
	Status      int      `json:"status,omitempty"`
	HeaderNames []string `json:"header_names,omitempty"`
	BodySize    int      `json:"body_size"`
	// Body is the stored body; callers that did not ask for it leave it
	// out.
	Body []byte `json:"body,omitempty"`
	// Location says where the store keeps the record, by digests only:
	// the table and key columns, or the Redis key.
	Location string `json:"location"`
}

// NewInfo describes rec, kept at location.
func NewInfo(rec idem.Record, location string) Info {
	in := Info{
		State:       rec.State.String(),
		Fingerprint: hex.EncodeToString(rec.Fingerprint[:]),
		CreatedAt:   rec.CreatedAt,
		CompletedAt: rec.CompletedAt,
		ExpiresAt:   rec.ExpiresAt,
		Location:    location,
	}
	if rec.State == idem.InFlight {
		in.LeaseToken, in.LeaseUntil = rec.Token, rec.LeaseUntil
		if Leaseless(rec.CreatedAt, rec.LeaseUntil) {
			in.LeaseUntil, in.NoLease = time.Time{}, true
		}
		return in
	}
	in.Status = rec.Response.Status
	for _, f := range rec.Response.Header {
		in.HeaderNames = append(in.HeaderNames, f.Name)
	}
	in.BodySize = len(rec.Response.Body)
	in.Body = rec.Response.Body
	return in
}

// Leaseless reports whether a record in flight created at created with a
// lease until leaseUntil was taken by an Engine on a store that takes no
// leases (idem.LocalStore, or a store used by one process alone, such as a
// SQLite file): such an Engine writes a lease of idem.MaxDuration, and the
// key is held until its handler ends, or its process does.
func Leaseless(created, leaseUntil time.Time) bool {
	return !created.IsZero() && !leaseUntil.Before(created.Add(idem.MaxDuration))
}

// ExpiredAt reports whether the record described no longer holds its key
// at now, as idem.Record.Expired.
func (in *Info) ExpiredAt(now time.Time) bool {
	if now.Before(in.ExpiresAt) {
		return false
	}
	return in.State == idem.Completed.String() || !in.NoLease && !now.Before(in.LeaseUntil)
}

// Stats are a store's counts of records.
type Stats struct {
	// Completed and InFlight count the records by state, expired ones
	// included until they are purged.
	Completed int64 `json:"completed"`
	InFlight  int64 `json:"in_flight"`
	// OldestInFlight is when the oldest record in flight was taken, and
	// OldestLeaseEnd the earliest end of a lease in flight: one in the
	// past is a holder that stopped renewing (a process that died). Zero
	// without records in flight; OldestLeaseEnd zero too, and NoLease set,
	// on a store that takes no leases (Leaseless), once Shown.
	OldestInFlight time.Time `json:"oldest_in_flight,omitzero"`
	OldestLeaseEnd time.Time `json:"oldest_lease_end,omitzero"`
	NoLease        bool      `json:"no_lease,omitempty"`
	// Expired counts the records expired at the time of the count, waiting
	// for the purge.
	Expired int64 `json:"expired"`
	// TopScopes are the scopes holding the most records, most first.
	TopScopes []ScopeCount `json:"top_scopes"`
	// Note says what the count cannot see, if anything (the records in
	// flight of a SQLite file that another process holds).
	Note string `json:"note,omitempty"`
}

// ScopeCount is the number of records of one scope.
type ScopeCount struct {
	// Scope stands for the scope. A store's RecordStats gives its digest
	// (ScopeDigest), UnknownScope for records whose store did not keep it;
	// what operators are shown (Shown: the Handler's answer, idemctl) is
	// its ScopeLabel instead, which a guessed scope cannot be checked
	// against without the secret.
	Scope   string `json:"scope_hash"`
	Records int64  `json:"records"`
}

// Shown is st as operators are shown it: each of its TopScopes by its
// ScopeLabel under secret, never by its digest; and on a store that takes
// no leases, no OldestLeaseEnd (a century ahead) but NoLease.
func Shown(st Stats, secret []byte) Stats {
	top := make([]ScopeCount, len(st.TopScopes))
	for i, sc := range st.TopScopes {
		top[i] = ScopeCount{Scope: ScopeLabel(secret, sc.Scope), Records: sc.Records}
	}
	st.TopScopes = top
	if st.InFlight > 0 && Leaseless(st.OldestInFlight, st.OldestLeaseEnd) {
		st.OldestLeaseEnd, st.NoLease = time.Time{}, true
	}
	return st
}

// UnknownScope stands in ScopeCount for records written without their
// scope's digest (by a Redis store of an earlier version).
const UnknownScope = "unknown"

// ScopeDigest is how a scope is shown in counts: the hex SHA-256 of its
// bytes, as the GORM store keeps it in its scope_hash column.
func ScopeDigest(scope string) string {
	sum := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(sum[:])
}

// ScopeLabel is how a scope is shown to operators, from its digest
// (ScopeDigest, as a store's RecordStats gives it): the first 16 hex digits
// of the HMAC-SHA256 of the digest's hex text under secret. The digest
// alone would not do: whoever can guess a scope (acct_42) can hash the
// guess and compare. Under the same secret a scope has the same label, so
// labels tell scopes apart and match across outputs; UnknownScope stays
// itself. In a shell:
//
//	printf %s "$(printf %s "$SCOPE" | sha256sum | cut -c1-64)" | openssl dgst -sha256 -hmac "$SECRET" | awk '{print $NF}' | cut -c1-16
func ScopeLabel(secret []byte, scopeDigest string) string {
	if scopeDigest == UnknownScope {
		return UnknownScope
	}
	return hmacHex(secret, scopeDigest, 8)
}

// KeyHash is how a key is shown in the handler's audit lines: the first 12
// hex digits of the HMAC-SHA256 of the key under secret, as the Engine's
// log lines show it (idemevent.Event.KeyHash) when secret is its
// Config.KeyHashSecret.
func KeyHash(secret []byte, key string) string {
	return hmacHex(secret, key, 6)
}

func hmacHex(secret []byte, data string, n int) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(data))
	return hex.EncodeToString(m.Sum(nil)[:n])
}

// PurgeAll runs s.Purge in batches of batch records until one comes back
// short, and returns how many it deleted in all.
func PurgeAll(ctx context.Context, s Store, now time.Time, batch int) (int, error) {
	if batch <= 0 {
		batch = DefaultPurgeBatch
	}
	total := 0
	for {
		n, err := s.Purge(ctx, now, batch)
		total += n
		if err != nil || n < batch {
			return total, err
		}
	}
}

// DefaultPurgeBatch is PurgeAll's batch when none is given.
const DefaultPurgeBatch = 1000

// TopScopes returns the n scopes of counts (by digest) holding the most
// records, most first, ties by digest.
func TopScopes(counts map[string]int64, n int) []ScopeCount {
	out := make([]ScopeCount, 0, len(counts))
	for s, c := range counts {
		out = append(out, ScopeCount{Scope: s, Records: c})
	}
	slices.SortFunc(out, func(a, b ScopeCount) int {
		if a.Records != b.Records {
			return cmp.Compare(b.Records, a.Records)
		}
		return strings.Compare(a.Scope, b.Scope)
	})
	return out[:min(len(out), max(n, 0))]
}
