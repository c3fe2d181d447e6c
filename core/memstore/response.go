package memstore

import (
	"encoding/binary"
	"unsafe"

	"github.com/idemkit/idemkit/core/exchange"
)

// A stored response is packed, after its record's other fields, into the
// shard's arena (see arena.go), which holds no pointers. The layout is
//
//	uvarint(header fields) uvarint(header values)
//	for each field: str(name) uvarint(values) str(value)...
//	body
//
// where str(s) is uvarint(i<<1|1) for s == commonStrings[i], and
// uvarint(len(s)<<1) s otherwise. Most responses carry only a
// Content-Type and a Location, whose names and usual values then cost a
// byte each instead of some thirty.

// commonStrings are the header names and values replayed most often. The
// list may change between versions: nothing packed outlives the process.
var commonStrings = [...]string{
	"Content-Type",
	"Location",
	"Content-Language",
	"Content-Location",
	"Link",
	"Retry-After",
	"Cache-Control",
	"Etag",
	"Last-Modified",
	"application/json",
	"application/json; charset=utf-8",
	"application/problem+json",
	"text/plain; charset=utf-8",
	"text/html; charset=utf-8",
	"text/plain",
	"application/xml",
	"application/octet-stream",
}

var commonIndex = func() map[string]int {
	m := make(map[string]int, len(commonStrings))
	for i, s := range commonStrings {
		m[s] = i
	}
	return m
}()

// appendResponse appends r's header and body, packed, to b.
func appendResponse(b []byte, r exchange.Response) []byte {
	values := 0
	for _, f := range r.Header {
		values += len(f.Values)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Header)))
	b = binary.AppendUvarint(b, uint64(values))
	for _, f := range r.Header {
		b = appendStr(b, f.Name)
		b = binary.AppendUvarint(b, uint64(len(f.Values)))
		for _, v := range f.Values {
			b = appendStr(b, v)
		}
	}
	return append(b, r.Body...)
}

func appendStr(b []byte, s string) []byte {
	if i, ok := commonIndex[s]; ok {
		return binary.AppendUvarint(b, uint64(i)<<1|1)
	}
	return append(binary.AppendUvarint(b, uint64(len(s))<<1), s...)
}

// unpackResponse rebuilds a response from appendResponse's bytes. b lies in
// the arena, whose bytes are never written again once a record is packed
// (see arena.go): the body and the header's uncommon strings are views of
// it, not copies. The header costs two allocations whatever its size: one
// array of fields and one of values, each field's values clipped so that
// appending to them copies.
func unpackResponse(status int, b []byte) exchange.Response {
	r := exchange.Response{Status: status}
	fields, b := uvarint(b)
	values, b := uvarint(b)
	if fields > 0 {
		r.Header = make([]exchange.HeaderField, fields)
		all := make([]string, values)
		v := 0
		for i := range r.Header {
			r.Header[i].Name, b = str(b)
			var n int
			n, b = uvarint(b)
			start := v
			for range n {
				all[v], b = str(b)
				v++
			}
			r.Header[i].Values = all[start:v:v]
		}
	}
	r.Body = b[:len(b):len(b)]
	return r
}

// maxShared is the most headers of common strings a shard keeps to share
// (see sharedHeader): a few dozen cover an application's responses.
const maxShared = 64

// response is unpackResponse under sh's lock, with the header shared
// (sharedHeader) when it is made of common strings only.
func (sh *shard) response(status int, b []byte) exchange.Response {
	n, key := commonHeader(b)
	if n == 0 {
		return unpackResponse(status, b)
	}
	h, ok := sh.shared[key]
	if !ok {
		h = unpackResponse(status, b[:n]).Header
		if len(sh.shared) < maxShared {
			if sh.shared == nil {
				sh.shared = make(map[uint64][]exchange.HeaderField)
			}
			sh.shared[key] = h
		}
	}
	b = b[n:]
	return exchange.Response{Status: status, Header: h, Body: b[:len(b):len(b)]}
}

// commonHeader returns the length n of the packed header at the start of b
// and, as a key, its bytes, when it has at least one field, takes at most
// seven bytes and names only common strings (the usual Content-Type alone
// takes four); otherwise n is 0. Such a header is the same for every
// record that packs the same bytes, so a shard unpacks it once and its
// replays share it: records a store returns are read-only (idem.Store),
// and a header's arrays are clipped, so that appending to them copies.
func commonHeader(b []byte) (n int, key uint64) {
	const most = 7
	if len(b) < 2 || b[0] == 0 || b[0] >= 0x80 || b[1] >= 0x80 {
		return 0, 0
	}
	fields, i := int(b[0]), 2
	for range fields {
		if i+1 >= len(b) || i+1 >= most || b[i]&1 == 0 || b[i] >= 0x80 || b[i+1] >= 0x80 {
			return 0, 0
		}
		values := int(b[i+1])
		i += 2
		for range values {
			if i >= len(b) || i >= most || b[i]&1 == 0 || b[i] >= 0x80 {
				return 0, 0
			}
			i++
		}
	}
	for j := range i {
		key |= uint64(b[j]) << (8 * j)
	}
	return i, key | uint64(i)<<56
}

// str reads what appendStr wrote.
func str(b []byte) (string, []byte) {
	n, b := uvarint(b)
	if n&1 == 1 {
		return commonStrings[n>>1], b
	}
	n >>= 1
	if n == 0 {
		return "", b
	}
	return unsafe.String(&b[0], n), b[n:]
}

// uvarint reads a length written with binary.AppendUvarint.
func uvarint(b []byte) (int, []byte) {
	n, size := binary.Uvarint(b)
	return int(n), b[size:]
}
