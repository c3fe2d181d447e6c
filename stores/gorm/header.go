package gormstore

import (
	"encoding/binary"
	"errors"

	idem "github.com/idemkit/idemkit/core"
)

// Stored headers are one binary column in a length-prefixed encoding:
//
//	version byte (1)
//	uvarint field count
//	per field: uvarint len, name; uvarint value count; per value: uvarint len, value
//
// Every string carries its length, so any byte may appear in a name or value
// and no escaping is needed. Replays decode it on every request, so decoding
// makes one string of the whole column and slices names and values out of
// it: three allocations whatever the number of fields.
const headerVersion = 1

var errBadHeader = errors.New("gormstore: stored headers are corrupt")

// appendHeader encodes h onto b. A nil or empty h encodes to nil, stored as
// NULL.
func appendHeader(b []byte, h []idem.HeaderField) []byte {
	if len(h) == 0 {
		return b
	}
	b = append(b, headerVersion)
	b = binary.AppendUvarint(b, uint64(len(h)))
	for _, f := range h {
		b = binary.AppendUvarint(b, uint64(len(f.Name)))
		b = append(b, f.Name...)
		b = binary.AppendUvarint(b, uint64(len(f.Values)))
		for _, v := range f.Values {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return b
}

// headerReader walks an encoded header string.
type headerReader struct {
	s   string
	off int
	err bool
}

func (r *headerReader) uvarint() int {
	var x uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if r.off >= len(r.s) {
			break
		}
		c := r.s[r.off]
		r.off++
		x |= uint64(c&0x7f) << shift
		if c < 0x80 {
			// A zero last group is a longer spelling of a shorter number,
			// and no count or length can exceed what is left to read.
			if c == 0 && shift > 0 || x > uint64(len(r.s)-r.off) {
				break
			}
			return int(x)
		}
	}
	r.err = true
	r.off = len(r.s)
	return 0
}

func (r *headerReader) str() string {
	n := r.uvarint()
	if r.err {
		return ""
	}
	s := r.s[r.off : r.off+n]
	r.off += n
	return s
}

// decodeHeader is the inverse of appendHeader.
func decodeHeader(b []byte) ([]idem.HeaderField, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if b[0] != headerVersion {
		return nil, errBadHeader
	}
	r := headerReader{s: string(b[1:])}
	nfields := r.uvarint()
	if r.err {
		return nil, errBadHeader
	}
	// Two passes: the first counts the values, so that one array holds them
	// all and each field's slice is clipped to its own part.
	start := r.off
	nvalues := 0
	for range nfields {
		r.str()
		n := r.uvarint()
		nvalues += n
		for range n {
			r.str()
		}
		if r.err {
			return nil, errBadHeader
		}
	}
	if r.off != len(r.s) {
		return nil, errBadHeader
	}
	r.off = start
	fields := make([]idem.HeaderField, nfields)
	values := make([]string, 0, nvalues)
	for i := range fields {
		name := r.str()
		n := r.uvarint()
		first := len(values)
		for range n {
			values = append(values, r.str())
		}
		fields[i] = idem.HeaderField{Name: name, Values: values[first:len(values):len(values)]}
	}
	return fields, nil
}
