package idem

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io"
	"mime"
	"mime/multipart"
	"slices"
	"strings"
	"sync"

	"github.com/idemkit/idemkit/core/exchange"
)

// Fingerprint identifies the payload of a request: a retry must carry the
// same fingerprint as the request that first used its key.
type Fingerprint [sha256.Size]byte

// String returns the fingerprint in hex.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

var fingerprintBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// DefaultFingerprint is SHA-256 over the method, the path (with its query),
// the Content-Encoding, if any, and the body. Its rule: two requests a server
// could read differently never share a fingerprint, and two sendings of one
// request do.
//
//   - A JSON body (application/json or any +json type) is canonicalised:
//     member order and insignificant whitespace do not matter, numbers keep
//     their literal text, and members whose names a decoder may take for
//     one name (encoding/json matches names case-insensitively, with
//     Unicode folding, and keeps the last match) keep their relative order.
//   - A multipart/form-data body counts by its parts (each part's header
//     fields, such as its name, file name and content type, and its content,
//     in order), not by its boundary, which clients choose at random for
//     each sending.
//   - A body with a Content-Encoding is hashed as sent, beside the encoding:
//     the same bytes with and without one are different requests.
//   - Other bodies, and JSON or forms that do not parse, are hashed as raw
//     bytes, together with whether they were sent as JSON or a form: a
//     server refuses the same bytes as JSON that it may take as text.
//
// Headers other than Content-Type and Content-Encoding are not part of it.
func DefaultFingerprint(r exchange.Request) Fingerprint {
	bp := fingerprintBufs.Get().(*[]byte)
	buf := (*bp)[:0]
	// Length prefixes and one-byte tags keep the fields apart: no choice of
	// method, path or encoding can produce another request's input.
	buf = appendField(buf, r.Method)
	buf = appendField(buf, r.Path)
	var out []byte
	done := false
	raw := byte('r') // the tag of a body hashed as sent: which media type it was sent as counts
	if enc := strings.TrimSpace(r.ContentEncoding); enc != "" {
		buf = appendField(append(buf, 'e'), enc)
	} else if isJSON(r.ContentType) {
		out, done = canonicalJSON(append(buf, 'j'), r.Body)
		raw = 'J'
	} else if boundary := formBoundary(r.ContentType); boundary != "" {
		out, done = appendFormParts(append(buf, 'm'), r.Body, boundary)
		raw = 'M'
	}
	if done {
		buf = out
	} else {
		buf = append(append(buf, raw), r.Body...)
	}
	sum := sha256.Sum256(buf)
	if cap(buf) <= 64<<10 {
		*bp = buf
		fingerprintBufs.Put(bp)
	}
	return sum
}

// appendField appends s with its length before it.
func appendField(buf []byte, s string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(s)))
	return append(buf, s...)
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

// formBoundary returns the boundary of a multipart/form-data Content-Type
// value, or "" for any other.
func formBoundary(contentType string) string {
	const form = "multipart/form-data"
	if len(contentType) < len(form) || !strings.EqualFold(contentType[:len(form)], form) {
		return "" // the common case, decided without parsing
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != form {
		return ""
	}
	return params["boundary"]
}

// appendFormParts appends, for each part of a multipart body in order, its
// header fields (sorted by name, values in order) and its content as sent,
// each with its length before it. ok is false when the body is not a
// well-formed multipart body with this boundary; the caller then hashes the
// raw bytes. What
// mime/multipart skips (the preamble before the first boundary, the
// epilogue after the last) is skipped here too, as a server skips it.
func appendFormParts(buf, body []byte, boundary string) (out []byte, ok bool) {
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF {
			return buf, true
		}
		if err != nil {
			return nil, false
		}
		names := make([]string, 0, len(p.Header))
		for name := range p.Header {
			names = append(names, name)
		}
		slices.Sort(names)
		buf = binary.AppendUvarint(append(buf, 'p'), uint64(len(names)))
		for _, name := range names {
			buf = appendField(buf, name)
			values := p.Header[name]
			buf = binary.AppendUvarint(buf, uint64(len(values)))
			for _, v := range values {
				buf = appendField(buf, v)
			}
		}
		content, err := io.ReadAll(p)
		if err != nil {
			return nil, false
		}
		buf = binary.AppendUvarint(buf, uint64(len(content)))
		buf = append(buf, content...)
	}
}
