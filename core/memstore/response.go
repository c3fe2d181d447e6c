package memstore

import (
	"encoding/binary"

	idem "github.com/idemkit/idemkit/core"
)

// A stored response is packed into one []byte, which holds no pointers: a
// store with many records then costs the garbage collector a mark per
// record instead of a scan of several small objects. The layout is
//
//	uvarint(header fields) uvarint(header values) uvarint(len(text)) text body
//
// where text is, field by field, uvarint(len(name)) name uvarint(values)
// and, for each value, uvarint(len(value)) value.

// packResponse copies r's header and body into a new packed slice.
func packResponse(r idem.Response) []byte {
	values, text := 0, 0
	for _, f := range r.Header {
		text += uvarintLen(len(f.Name)) + len(f.Name) + uvarintLen(len(f.Values))
		for _, v := range f.Values {
			text += uvarintLen(len(v)) + len(v)
		}
		values += len(f.Values)
	}
	size := uvarintLen(len(r.Header)) + uvarintLen(values) + uvarintLen(text) + text + len(r.Body)
	b := make([]byte, 0, size)
	b = binary.AppendUvarint(b, uint64(len(r.Header)))
	b = binary.AppendUvarint(b, uint64(values))
	b = binary.AppendUvarint(b, uint64(text))
	for _, f := range r.Header {
		b = appendString(b, f.Name)
		b = binary.AppendUvarint(b, uint64(len(f.Values)))
		for _, v := range f.Values {
			b = appendString(b, v)
		}
	}
	return append(b, r.Body...)
}

// unpackResponse rebuilds a response from packResponse's slice (nil for a
// record still in flight). The body shares b, which is never modified; the
// header costs three allocations whatever its size: one string holds every
// name and value, one array the fields and one the values, each field's
// values clipped so that appending to them copies.
func unpackResponse(status int, b []byte) idem.Response {
	r := idem.Response{Status: status}
	if b == nil {
		return r
	}
	fields, b := uvarint(b)
	values, b := uvarint(b)
	textLen, b := uvarint(b)
	if fields > 0 {
		text := string(b[:textLen])
		r.Header = make([]idem.HeaderField, fields)
		all := make([]string, values)
		at, v := 0, 0
		for i := range r.Header {
			r.Header[i].Name, at = textString(text, at)
			var n int
			n, at = textUvarint(text, at)
			start := v
			for range n {
				all[v], at = textString(text, at)
				v++
			}
			r.Header[i].Values = all[start:v:v]
		}
	}
	body := b[textLen:]
	r.Body = body[:len(body):len(body)]
	return r
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func uvarintLen(n int) int {
	size := 1
	for ; n >= 0x80; n >>= 7 {
		size++
	}
	return size
}

// uvarint reads a length that packResponse wrote.
func uvarint(b []byte) (int, []byte) {
	n, size := binary.Uvarint(b)
	return int(n), b[size:]
}

// textUvarint reads a length from the header text at offset at.
func textUvarint(text string, at int) (int, int) {
	n, shift := 0, 0
	for {
		c := text[at]
		at++
		n |= int(c&0x7f) << shift
		if c < 0x80 {
			return n, at
		}
		shift += 7
	}
}

// textString reads a length-prefixed string from the header text at offset
// at, as a substring: no copy.
func textString(text string, at int) (string, int) {
	n, at := textUvarint(text, at)
	return text[at : at+n], at + n
}
