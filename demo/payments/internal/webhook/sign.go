// Package webhook signs and checks webhooks as the Standard Webhooks
// specification says, and delivers the simulated payment provider's
// events to the demo that way: at least once, duplicated and reordered on
// purpose, retried after a 5xx or a timeout.
//
// A webhook carries three header fields: webhook-id, the message's id,
// the same on every delivery of it; webhook-timestamp, when this delivery
// was signed, in Unix seconds; and webhook-signature, one or more
// space-separated "v1,<base64>" entries, each the HMAC-SHA256 of
// "<id>.<timestamp>.<body>" under the endpoint's secret. The secret is
// written "whsec_" and the key's base64.
package webhook

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The header fields of a signed webhook.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// Tolerance is how far a webhook's timestamp may be from the receiver's
// clock, either way: an older delivery may be a captured one replayed, and
// is refused (the sender signs each retry anew).
const Tolerance = 5 * time.Minute

// secretPrefix begins a secret's written form.
const secretPrefix = "whsec_"

// Secret is an endpoint's signing key.
type Secret []byte

// ParseSecret reads a secret in its written form, "whsec_" and the key's
// standard base64 (the prefix may be left out).
func ParseSecret(s string) (Secret, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, secretPrefix))
	switch {
	case err != nil:
		return nil, fmt.Errorf("a webhook secret is %s and the key in standard base64: %w", secretPrefix, err)
	case len(key) < 24 || len(key) > 64:
		return nil, fmt.Errorf("a webhook secret's key has 24 to 64 bytes, not %d", len(key))
	}
	return key, nil
}

// NewSecret returns a random secret of 32 bytes.
func NewSecret() Secret {
	key := make([]byte, 32)
	rand.Read(key)
	return key
}

// String is the secret's written form.
func (s Secret) String() string { return secretPrefix + base64.StdEncoding.EncodeToString(s) }

// Sign returns the webhook-signature value of the message id with body,
// signed at ts.
func (s Secret) Sign(id string, ts time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(s.mac(id, strconv.FormatInt(ts.Unix(), 10), body))
}

func (s Secret) mac(id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, s)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Why Verify refuses a webhook.
var (
	// ErrUnsigned: a header field is missing or malformed, or no
	// signature is the body's under the secret.
	ErrUnsigned = errors.New("webhook signature invalid")
	// ErrStale: the timestamp is further than Tolerance from now.
	ErrStale = errors.New("webhook timestamp outside the tolerance")
)

// Verify checks a webhook's header fields (as Header reads them) and body
// at now. It returns an error wrapping ErrStale or ErrUnsigned, saying
// which field is at fault, or nil. The signatures are compared in constant
// time, and the timestamp checked only once one of them matches, so that
// no one learns anything of the secret from which check failed.
func (s Secret) Verify(header func(string) string, body []byte, now time.Time) error {
	id, ts, sigs := header(HeaderID), header(HeaderTimestamp), header(HeaderSignature)
	switch {
	case id == "":
		return fmt.Errorf("%w: no %s header", ErrUnsigned, HeaderID)
	case ts == "":
		return fmt.Errorf("%w: no %s header", ErrUnsigned, HeaderTimestamp)
	case sigs == "":
		return fmt.Errorf("%w: no %s header", ErrUnsigned, HeaderSignature)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s must be an integer number of Unix seconds", ErrUnsigned, HeaderTimestamp)
	}
	want := s.mac(id, ts, body)
	matched := false
	for _, entry := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue // another scheme, which this receiver does not know
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err == nil && hmac.Equal(got, want) {
			matched = true
		}
	}
	if !matched {
		return fmt.Errorf("%w: no v1 signature in %s is the body's under the endpoint's secret", ErrUnsigned, HeaderSignature)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > Tolerance || d < -Tolerance {
		return fmt.Errorf("%w: signed at %s, %v from now; the tolerance is %v", ErrStale,
			time.Unix(sec, 0).UTC().Format(time.RFC3339), d.Round(time.Second), Tolerance)
	}
	return nil
}
