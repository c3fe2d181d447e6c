// Package costfloor takes parts of idemkit out of a measurement, to show
// what the rest costs: the floor below which no store or fingerprint design
// can bring a benchmark's ratio. It is for benchmarks alone: an Engine
// configured with it stores nothing and protects nothing.
//
// It is internal, like the benchmarks; Go's internal rule goes by import
// path, so the bench module may import it too.
package costfloor

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// Ablation names what is taken out of an Engine's configuration.
type Ablation string

const (
	// None takes nothing out.
	None Ablation = ""
	// RawFingerprint replaces the default fingerprint with a SHA-256 of
	// the method, path and body bytes as sent: no JSON canonical form, no
	// content type or encoding, no form parts.
	RawFingerprint Ablation = "raw-fingerprint"
	// NoStore replaces the store with one that keeps nothing: every key is
	// new, every request runs.
	NoStore Ablation = "no-store"
	// NoStoreNoFingerprint is NoStore with a fingerprint that hashes nothing.
	NoStoreNoFingerprint Ablation = "no-store-no-fingerprint"
)

// Ablations are the ablations other than None, from the least taken out.
var Ablations = []Ablation{RawFingerprint, NoStore, NoStoreNoFingerprint}

// Parse returns the ablation named s ("" or "none" is None).
func Parse(s string) (Ablation, error) {
	if s == "" || s == "none" {
		return None, nil
	}
	for _, a := range Ablations {
		if string(a) == s {
			return a, nil
		}
	}
	return None, fmt.Errorf("costfloor: no ablation %q (one of none, %s, %s, %s)", s, RawFingerprint, NoStore, NoStoreNoFingerprint)
}

// Apply returns cfg with a's parts taken out.
func (a Ablation) Apply(cfg idem.Config) idem.Config {
	switch a {
	case RawFingerprint:
		cfg.Fingerprint = rawFingerprint
	case NoStore:
		cfg.Store = NothingStored()
	case NoStoreNoFingerprint:
		cfg.Store = NothingStored()
		cfg.Fingerprint = func(exchange.Request) idem.Fingerprint { return idem.Fingerprint{} }
	}
	return cfg
}

func rawFingerprint(r exchange.Request) idem.Fingerprint {
	h := sha256.New()
	h.Write([]byte(r.Method))
	h.Write([]byte{0})
	h.Write([]byte(r.Path))
	h.Write([]byte{0})
	h.Write(r.Body)
	var fp idem.Fingerprint
	h.Sum(fp[:0])
	return fp
}

// NothingStored returns the store of NoStore: a local store that keeps
// nothing, for measuring (or counting the allocations of) the Engine alone.
func NothingStored() idem.Store { return nothingStored{} }

// nothingStored is a local store that keeps nothing: Acquire always takes
// a new key, and every other call succeeds without effect.
type nothingStored struct{}

func (nothingStored) Local() {}

func (nothingStored) Acquire(_ context.Context, a idem.Acquire) (idem.Record, idem.AcquireOutcome, error) {
	return idem.Record{ID: a.ID, Fingerprint: a.Fingerprint, State: idem.InFlight, Token: a.Token,
		LeaseUntil: a.LeaseUntil, ExpiresAt: a.ExpiresAt, CreatedAt: a.Now}, idem.AcquireCreated, nil
}

func (nothingStored) Complete(context.Context, idem.ID, string, idem.Completion) error { return nil }
func (nothingStored) Renew(context.Context, idem.ID, string, time.Time) error          { return nil }
func (nothingStored) Release(context.Context, idem.ID, string) error                   { return nil }
func (nothingStored) Get(context.Context, idem.ID) (idem.Record, error) {
	return idem.Record{}, idem.ErrNotFound
}
func (nothingStored) Purge(context.Context, time.Time, int) (int, error) { return 0, nil }

var (
	_ idem.Store      = nothingStored{}
	_ idem.LocalStore = nothingStored{}
)
