package httpwire

import (
	"fmt"
	"strconv"
	"strings"
)

// KeyLen is the length of every key the generator sends: that of a UUID,
// which is also the only length Fiber's built-in idempotency middleware
// accepts by default.
const KeyLen = 36

// Request is a POST request rendered once as bytes. When it carries a key,
// SetKey overwrites the key's bytes in place, so each request of a run
// costs a copy at most, never a rendering.
type Request struct {
	buf    []byte
	keyOff int // -1: no key header
}

// NewRequest renders "POST path" to host with a JSON body and, if
// keyHeader is not empty, a key header holding a placeholder key of KeyLen
// bytes.
func NewRequest(host, path, keyHeader string, body []byte) (*Request, error) {
	for _, s := range []string{host, path, keyHeader} {
		if strings.ContainsAny(s, "\r\n") {
			return nil, fmt.Errorf("httpwire: %q holds a line break", s)
		}
	}
	var b strings.Builder
	b.WriteString("POST " + path + " HTTP/1.1\r\nHost: " + host + "\r\n" +
		"Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n")
	r := &Request{keyOff: -1}
	if keyHeader != "" {
		b.WriteString(keyHeader + ": ")
		r.keyOff = b.Len()
		b.WriteString(strings.Repeat("0", KeyLen) + "\r\n")
	}
	b.WriteString("\r\n")
	b.Write(body)
	r.buf = []byte(b.String())
	return r, nil
}

// Bytes returns the request as sent. It aliases the Request: SetKey
// changes it.
func (r *Request) Bytes() []byte { return r.buf }

// HasKey reports whether the request carries a key header.
func (r *Request) HasKey() bool { return r.keyOff >= 0 }

// SetKey writes key, which must be KeyLen bytes, into the key header.
func (r *Request) SetKey(key []byte) {
	if r.keyOff < 0 || len(key) != KeyLen {
		panic("httpwire: SetKey on a request without a key, or with a key of the wrong length")
	}
	copy(r.buf[r.keyOff:], key)
}

// Clone returns an independent copy, for a connection to patch its own.
func (r *Request) Clone() *Request {
	return &Request{buf: append([]byte(nil), r.buf...), keyOff: r.keyOff}
}

// FormatKey writes into dst (KeyLen bytes) a UUID-shaped key, lower-case
// hex in 8-4-4-4-12 groups, made of a 32-bit run prefix, a 16-bit stream
// and a 64-bit sequence number: distinct keys for distinct (prefix,
// stream, seq) without any allocation.
func FormatKey(dst []byte, prefix uint32, stream uint16, seq uint64) {
	const hexDigits = "0123456789abcdef"
	var digits [32]byte
	put := func(at int, v uint64, n int) {
		for i := n - 1; i >= 0; i-- {
			digits[at+i] = hexDigits[v&0xf]
			v >>= 4
		}
	}
	put(0, uint64(prefix), 8)
	put(8, uint64(stream), 4)
	put(12, 0, 4)
	put(16, seq, 16)
	// Insert the dashes: 8-4-4-4-12.
	j := 0
	for i, d := range digits {
		if i == 8 || i == 12 || i == 16 || i == 20 {
			dst[j] = '-'
			j++
		}
		dst[j] = d
		j++
	}
}
