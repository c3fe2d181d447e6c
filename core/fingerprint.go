package idem

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"sync"
)

// Fingerprint identifies the payload of a request: a retry must carry the
// same fingerprint as the request that first used its key.
type Fingerprint [sha256.Size]byte

// String returns the fingerprint in hex.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

var fingerprintBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// DefaultFingerprint is SHA-256 over the method, the path (with its query)
// and the body. JSON bodies (application/json or any +json type) are
// canonicalised first, so member order and insignificant whitespace do not
// matter; numbers keep their literal text. Other bodies, and JSON bodies
// that do not parse, are hashed as raw bytes. Headers are not part of it.
func DefaultFingerprint(r Request) Fingerprint {
	bp := fingerprintBufs.Get().(*[]byte)
	buf := (*bp)[:0]
	// Length prefixes keep the fields apart: no choice of method and path can
	// produce another request's input.
	buf = binary.AppendUvarint(buf, uint64(len(r.Method)))
	buf = append(buf, r.Method...)
	buf = binary.AppendUvarint(buf, uint64(len(r.Path)))
	buf = append(buf, r.Path...)
	canonical := false
	if isJSON(r.ContentType) {
		var out []byte
		if out, canonical = canonicalJSON(append(buf, 'j'), r.Body); canonical {
			buf = out
		}
	}
	if !canonical {
		buf = append(append(buf, 'r'), r.Body...)
	}
	sum := sha256.Sum256(buf)
	if cap(buf) <= 64<<10 {
		*bp = buf
		fingerprintBufs.Put(bp)
	}
	return sum
}

// isJSON reports whether a Content-Type value names JSON: application/json
// or a structured suffix +json, with any parameters.
func isJSON(contentType string) bool {
	mt := contentType
	if i := strings.IndexByte(mt, ';'); i >= 0 {
		mt = mt[:i]
	}
	mt = strings.TrimSpace(mt)
	if len(mt) >= 5 && strings.EqualFold(mt[len(mt)-5:], "+json") {
		return strings.IndexByte(mt, '/') > 0
	}
	return strings.EqualFold(mt, "application/json")
}
