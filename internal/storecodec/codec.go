// Package storecodec is the binary encoding of a stored response's header
// fields that idemkit's stores share, for store authors who keep a
// response as bytes:
//
//	uvarint field count
//	per field: uvarint name length, name; uvarint value count;
//	           per value: uvarint length, value
//
// Every string carries its length, so any byte may appear in a name or a
// value and nothing is escaped. The decoder is strict: a length or count
// spelled with more bytes than it needs, or one larger than what is left
// to read, is refused, so one list of fields has one encoding.
package storecodec

import (
	"encoding/binary"
	"errors"

	"github.com/idemkit/idemkit/core/exchange"
)

// ErrCorrupt is returned for bytes that are not an encoding of header
// fields.
var ErrCorrupt = errors.New("storecodec: corrupt header fields")

// AppendHeader appends the encoding of h to b.
func AppendHeader(b []byte, h []exchange.HeaderField) []byte {
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

// HeaderSize is the length of the encoding of h, for sizing a buffer.
func HeaderSize(h []exchange.HeaderField) int {
	n := uvarintLen(uint64(len(h)))
	for _, f := range h {
		n += uvarintLen(uint64(len(f.Name))) + len(f.Name) + uvarintLen(uint64(len(f.Values)))
		for _, v := range f.Values {
			n += uvarintLen(uint64(len(v))) + len(v)
		}
	}
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// ReadHeader decodes the header fields encoded at the start of b and
// returns them with the bytes that follow. A count of zero gives nil
// fields. The names and values share one string made of b's encoding, so
// a replay costs three allocations whatever the number of fields.
func ReadHeader(b []byte) (h []exchange.HeaderField, rest []byte, err error) {
	r := reader{b: b}
	nfields := r.uvarint()
	// Two passes: the first finds the end and counts the values, so that
	// one array holds them all and each field's slice is clipped to its
	// own part.
	start, nvalues := r.off, 0
	for range nfields {
		r.skip()
		n := r.uvarint()
		nvalues += n
		for range n {
			r.skip()
		}
		if r.bad {
			break
		}
	}
	if r.bad {
		return nil, nil, ErrCorrupt
	}
	end := r.off
	if nfields == 0 {
		return nil, b[end:], nil
	}
	s := string(b[start:end])
	sr := reader{s: s}
	h = make([]exchange.HeaderField, nfields)
	values := make([]string, 0, nvalues)
	for i := range h {
		name := sr.str()
		n := sr.uvarint()
		first := len(values)
		for range n {
			values = append(values, sr.str())
		}
		h[i] = exchange.HeaderField{Name: name, Values: values[first:len(values):len(values)]}
	}
	return h, b[end:], nil
}

// reader walks an encoding held in b, or in s for the second pass.
type reader struct {
	b   []byte
	s   string
	off int
	bad bool
}

func (r *reader) len() int {
	if r.s != "" {
		return len(r.s)
	}
	return len(r.b)
}

func (r *reader) at(i int) byte {
	if r.s != "" {
		return r.s[i]
	}
	return r.b[i]
}

// uvarint reads a length or count: minimal, and no more than what is left.
func (r *reader) uvarint() int {
	var x uint64
	for shift := uint(0); shift < 64 && !r.bad; shift += 7 {
		if r.off >= r.len() {
			break
		}
		c := r.at(r.off)
		r.off++
		x |= uint64(c&0x7f) << shift
		if c < 0x80 {
			if c == 0 && shift > 0 || x > uint64(r.len()-r.off) {
				break
			}
			return int(x)
		}
	}
	r.bad, r.off = true, r.len()
	return 0
}

func (r *reader) skip() {
	n := r.uvarint()
	r.off += n
}

func (r *reader) str() string {
	n := r.uvarint()
	v := r.s[r.off : r.off+n]
	r.off += n
	return v
}
