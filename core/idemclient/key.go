package idemclient

import (
	"crypto/rand"
	"encoding/hex"
)

// NewKey returns a fresh Idempotency-Key header value: a random (version 4)
// UUID from crypto/rand, as an RFC 9651 sf-string, such as
// "8e03978e-40d5-43e8-bc93-6894a57f9324" with its quotes. Use it to create
// a key that outlives one call, for instance stored with a pending
// operation so that a retry after a restart reuses it.
func NewKey() string {
	var u [16]byte
	_, _ = rand.Read(u[:])  // never fails: it crashes the program rather than return weak bytes
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	var b [38]byte
	b[0], b[37] = '"', '"'
	hex.Encode(b[1:9], u[0:4])
	b[9] = '-'
	hex.Encode(b[10:14], u[4:6])
	b[14] = '-'
	hex.Encode(b[15:19], u[6:8])
	b[19] = '-'
	hex.Encode(b[20:24], u[8:10])
	b[24] = '-'
	hex.Encode(b[25:37], u[10:16])
	return string(b[:])
}
