package idem

import (
	"errors"
	"testing"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
)

// TestDecide has one row per row of the policy's table of outcomes
// (docs/policy.md), with what the store answered for it.
func TestDecide(t *testing.T) {
	fp, other := Fingerprint{1}, Fingerprint{2}
	running := &Record{Fingerprint: fp, State: InFlight}
	done := &Record{Fingerprint: fp, State: Completed}
	unreachable := errors.New("dial tcp: connection refused")
	type want struct {
		action  exchange.Action
		event   idemevent.Kind
		problem string
		replay  bool
	}
	for _, c := range []struct {
		situation string
		// before the store: the key's and the body's errors
		keyErr, bodyErr error
		keyOptional     bool
		// the store's answer
		rec      *Record
		outcome  AcquireOutcome
		err      error
		failOpen bool
		want     want
	}{
		{situation: "new key", outcome: AcquireCreated, want: want{exchange.Run, idemevent.First, "", false}},
		{situation: "same key, same fingerprint, completed", rec: done, want: want{exchange.Respond, idemevent.Replay, "", true}},
		{situation: "same key, same fingerprint, still running", rec: running, want: want{exchange.Respond, idemevent.Conflict, exchange.ProblemInProgress, false}},
		{situation: "same key, other fingerprint, running", rec: &Record{Fingerprint: other, State: InFlight}, want: want{exchange.Respond, idemevent.Mismatch, exchange.ProblemKeyReused, false}},
		{situation: "same key, other fingerprint, completed", rec: &Record{Fingerprint: other, State: Completed}, want: want{exchange.Respond, idemevent.Mismatch, exchange.ProblemKeyReused, false}},
		{situation: "guarded route, no key", keyErr: ErrKeyMissing, want: want{exchange.Respond, idemevent.KeyMissing, exchange.ProblemKeyMissing, false}},
		{situation: "guarded route, no key, optional mode", keyErr: ErrKeyMissing, keyOptional: true, want: want{exchange.Pass, 0, "", false}},
		{situation: "malformed key", keyErr: ErrKeyInvalid, want: want{exchange.Respond, idemevent.KeyInvalid, exchange.ProblemKeyInvalid, false}},
		{situation: "malformed key, optional mode", keyErr: ErrKeyInvalid, keyOptional: true, want: want{exchange.Respond, idemevent.KeyInvalid, exchange.ProblemKeyInvalid, false}},
		{situation: "request body over the limit", bodyErr: ErrBodyTooLarge, want: want{exchange.Respond, idemevent.TooLarge, exchange.ProblemPayloadTooLarge, false}},
		{situation: "request body unreadable", bodyErr: errors.New("unexpected EOF"), want: want{exchange.Respond, idemevent.BodyUnreadable, exchange.ProblemBodyUnreadable, false}},
		{situation: "key expired (the store creates a new record)", outcome: AcquireCreated, want: want{exchange.Run, idemevent.First, "", false}},
		{situation: "crashed holder's lease ran out, same fingerprint", outcome: AcquireTookOver, want: want{exchange.Run, idemevent.Takeover, "", false}},
		{situation: "store unreachable", err: unreachable, want: want{exchange.Respond, idemevent.StoreError, exchange.ProblemStoreUnavailable, false}},
		{situation: "store unreachable, fail open", err: unreachable, failOpen: true, want: want{exchange.Pass, idemevent.Unprotected, "", false}},
		{situation: "client gone before its key was taken", err: errClientGone, want: want{exchange.Respond, idemevent.ClientGone, "", false}},
		{situation: "client gone, fail open (nobody to run the handler for)", err: errClientGone, failOpen: true, want: want{exchange.Respond, idemevent.ClientGone, "", false}},
		{situation: "store full", err: ErrStoreFull, want: want{exchange.Respond, idemevent.StoreFull, exchange.ProblemStoreFull, false}},
		{situation: "store full, fail open (a full store is no outage)", err: ErrStoreFull, failOpen: true, want: want{exchange.Respond, idemevent.StoreFull, exchange.ProblemStoreFull, false}},
	} {
		t.Run(c.situation, func(t *testing.T) {
			v, final := decideRequest(c.keyErr, c.bodyErr, c.keyOptional)
			if final != (c.keyErr != nil || c.bodyErr != nil) {
				t.Fatalf("decideRequest final = %v", final)
			}
			if !final {
				rec := c.rec
				if rec == nil {
					rec = &Record{}
				}
				outcome := c.outcome
				if c.rec != nil {
					outcome = AcquireExisting
				}
				v = decide(rec, outcome, c.err, fp, c.failOpen)
			}
			if got := (want{v.action, v.event, v.problem, v.replay}); got != c.want {
				t.Fatalf("verdict %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestStorable(t *testing.T) {
	for status, want := range map[int]bool{
		100: false, 200: true, 201: true, 204: true, 301: true, 304: true, 400: true, 401: true, 404: true,
		408: false, 409: false, 422: true, 425: false, 429: false, 499: true, 500: false, 503: false,
	} {
		if got := exchange.Storable(status); got != want {
			t.Errorf("exchange.Storable(%d) = %v, want %v", status, got, want)
		}
	}
}
