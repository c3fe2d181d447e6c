package idemtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// oddIDs are scopes and keys a store must keep apart and return as they
// are: long, sharing long prefixes, not UTF-8, with NUL and with the
// characters that mean something to key spaces and SQL.
func oddIDs() []idem.ID {
	long := strings.Repeat("s", 255)
	return []idem.ID{
		{Scope: long + "-tenant-a", Key: "k"},
		{Scope: long + "-tenant-b", Key: "k"},
		{Scope: strings.Repeat("t", 300), Key: "k"},
		{Scope: "acct", Key: strings.Repeat("k", 255)},
		{Scope: "acct", Key: strings.Repeat("k", 254) + "j"},
		{Scope: strings.Repeat("j", 64<<10), Key: "big-scope"},
		{Scope: "bearer \xff\xfe token", Key: "k"},
		{Scope: "acct", Key: "nul\x00byte"},
		{Scope: "acct\x00", Key: "byte"},
		{Scope: "{tag}", Key: "k*?[]'\"\\;--"},
		{Scope: "", Key: "k"},
		{Scope: "ACCT", Key: "K"},
		{Scope: "acct", Key: "K "},
	}
}

// checkAnyBytes: any scope and key the Engine accepts is its own record,
// and the store hands back the ID it was given.
func checkAnyBytes(ctx context.Context, s idem.Store) error {
	ids := oddIDs()
	for i, id := range ids {
		rec, err := acquire(ctx, s, acquireAt(id, fpA, fmt.Sprintf("tok-%d", i), t0), idem.AcquireCreated)
		if err != nil {
			return fmt.Errorf("ID %d (scope of %d bytes, key of %d bytes): %w", i, len(id.Scope), len(id.Key), err)
		}
		if rec.ID != id {
			return fmt.Errorf("ID %d: Acquire returned another ID", i)
		}
	}
	for i, id := range ids {
		rec, err := s.Get(ctx, id)
		if err != nil {
			return fmt.Errorf("Get(ID %d): %w", i, err)
		}
		if rec.ID != id || rec.Token != fmt.Sprintf("tok-%d", i) {
			return fmt.Errorf("ID %d: Get returned token %q: records of different IDs are mixed up", i, rec.Token)
		}
	}
	return nil
}

// checkRenewBatch: a store with the batched capability renews exactly the
// leases its tokens still hold, and names the others lost.
func checkRenewBatch(ctx context.Context, s idem.Store) error {
	b, ok := s.(idem.BatchRenewer)
	if !ok {
		return nil // optional capability
	}
	held, wantLost, err := renewBatchRecords(ctx, s)
	if err != nil {
		return err
	}
	lost := make([]bool, len(held))
	until := t0.Add(lease + 5*lease)
	if err := b.RenewBatch(ctx, held, until, lost); err != nil {
		return fmt.Errorf("RenewBatch: %w", err)
	}
	for i := range held {
		if lost[i] != wantLost[i] {
			return fmt.Errorf("RenewBatch: lost[%d] (%s, %s) = %v, want %v", i, held[i].ID.Key, held[i].Token, lost[i], wantLost[i])
		}
	}
	// The renewed lease holds past the old one; the new holder of "taken"
	// keeps its own lease.
	if _, err := acquire(ctx, s, acquireAt(acctID("held"), fpA, "tok-late", t0.Add(2*lease)), idem.AcquireExisting); err != nil {
		return fmt.Errorf("after RenewBatch, the renewed lease did not hold: %w", err)
	}
	if rec, err := s.Get(ctx, acctID("taken")); err != nil || rec.Token != "tok-new" || !sameTime(rec.LeaseUntil, t0.Add(2*lease)) {
		return fmt.Errorf("RenewBatch touched the record of a lost lease: %+v, %v", rec, err)
	}
	if err := checkRenewBatchMany(ctx, s, b, until); err != nil {
		return err
	}
	if err := b.RenewBatch(ctx, nil, until, nil); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("RenewBatch of no lease: %w", err)
	}
	return nil
}

func acctID(key string) idem.ID { return idem.ID{Scope: "acct", Key: key} }

// renewBatchRecords makes a lease held, one taken over, one completed,
// one released, and returns them in a batch with leases never held, and
// which of them are lost.
func renewBatchRecords(ctx context.Context, s idem.Store) ([]idem.Held, []bool, error) {
	for _, k := range []string{"held", "taken", "done", "gone"} {
		if _, err := acquire(ctx, s, acquireAt(acctID(k), fpA, "tok-"+k, t0), idem.AcquireCreated); err != nil {
			return nil, nil, err
		}
	}
	// taken: the lease ran out and another request took it over.
	if _, err := acquire(ctx, s, acquireAt(acctID("taken"), fpA, "tok-new", t0.Add(lease)), idem.AcquireTookOver); err != nil {
		return nil, nil, err
	}
	if err := s.Complete(ctx, acctID("done"), "tok-done", idem.Completion{Response: exchange.Response{Status: 201, Body: []byte{}},
		CompletedAt: t0, ExpiresAt: t0.Add(ttl)}); err != nil {
		return nil, nil, err
	}
	if err := s.Release(ctx, acctID("gone"), "tok-gone"); err != nil {
		return nil, nil, err
	}
	held := []idem.Held{
		{ID: acctID("held"), Token: "tok-held"},
		{ID: acctID("taken"), Token: "tok-taken"},
		{ID: acctID("done"), Token: "tok-done"},
		{ID: acctID("gone"), Token: "tok-gone"},
		{ID: acctID("never"), Token: "tok-never"},
		{ID: idem.ID{Scope: "other", Key: "held"}, Token: "tok-held"},
		{ID: acctID("held"), Token: "tok-wrong"},
	}
	return held, []bool{false, true, true, true, true, true, true}, nil
}

// checkRenewBatchMany renews more leases in one batch than a store is
// likely to send in one statement or script.
func checkRenewBatchMany(ctx context.Context, s idem.Store, b idem.BatchRenewer, until time.Time) error {
	var many []idem.Held
	for i := range 1200 {
		k := acctID(fmt.Sprintf("many-%d", i))
		if _, err := acquire(ctx, s, acquireAt(k, fpA, "tok", t0), idem.AcquireCreated); err != nil {
			return err
		}
		many = append(many, idem.Held{ID: k, Token: "tok"})
	}
	lost := make([]bool, len(many))
	if err := b.RenewBatch(ctx, many, until, lost); err != nil {
		return fmt.Errorf("RenewBatch of %d leases: %w", len(many), err)
	}
	for i := range many {
		if lost[i] {
			return fmt.Errorf("RenewBatch of %d leases: lease %d reported lost", len(many), i)
		}
	}
	if rec, err := s.Get(ctx, many[len(many)-1].ID); err != nil || !sameTime(rec.LeaseUntil, until) {
		return fmt.Errorf("RenewBatch of %d leases did not renew the last one: %+v, %v", len(many), rec.LeaseUntil, err)
	}
	return nil
}

// checkRenewNeverShortens: a renewal that lands after a newer one (its
// caller gave up on it) leaves the newer, later lease in place; so does a
// batch.
func checkRenewNeverShortens(ctx context.Context, s idem.Store) error {
	id := idem.ID{Scope: "acct", Key: "k-late"}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-1", t0), idem.AcquireCreated); err != nil {
		return err
	}
	if err := s.Renew(ctx, id, "tok-1", t0.Add(3*lease)); err != nil {
		return fmt.Errorf("Renew: %w", err)
	}
	if err := s.Renew(ctx, id, "tok-1", t0.Add(2*lease)); err != nil {
		return fmt.Errorf("a late Renew: %w", err)
	}
	if b, ok := s.(idem.BatchRenewer); ok {
		lost := make([]bool, 1)
		if err := b.RenewBatch(ctx, []idem.Held{{ID: id, Token: "tok-1"}}, t0.Add(lease), lost); err != nil || lost[0] {
			return fmt.Errorf("a late RenewBatch: %v (lost %v)", err, lost[0])
		}
	}
	if _, err := acquire(ctx, s, acquireAt(id, fpA, "tok-2", t0.Add(2*lease+time.Second)), idem.AcquireExisting); err != nil {
		return fmt.Errorf("a late renewal moved the lease back: %w", err)
	}
	if rec, err := s.Get(ctx, id); err != nil || !sameTime(rec.LeaseUntil, t0.Add(3*lease)) {
		return fmt.Errorf("lease after a late renewal = %v (%v), want the later one", rec.LeaseUntil, err)
	}
	return nil
}
