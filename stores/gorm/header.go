package gormstore

import (
	"errors"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/internal/storecodec"
)

// Stored headers are one binary column: a version byte, then the header
// fields in the encoding every idemkit store shares (package storecodec).
// Replays decode it on every request; the decoder makes one string of the
// column and slices names and values out of it.
const headerVersion = 1

var errBadHeader = errors.New("gormstore: stored headers are corrupt")

// appendHeader encodes h onto b. A nil or empty h encodes to nil, stored as
// NULL.
func appendHeader(b []byte, h []exchange.HeaderField) []byte {
	if len(h) == 0 {
		return b
	}
	return storecodec.AppendHeader(append(b, headerVersion), h)
}

// decodeHeader is the inverse of appendHeader.
func decodeHeader(b []byte) ([]exchange.HeaderField, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if b[0] != headerVersion {
		return nil, errBadHeader
	}
	h, rest, err := storecodec.ReadHeader(b[1:])
	if err != nil || len(rest) != 0 {
		return nil, errBadHeader
	}
	return h, nil
}
