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
