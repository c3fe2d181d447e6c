package idem

import (
	"cmp"
	"encoding/binary"
	"slices"
	"sync"
	"unicode"
	"unicode/utf8"
)

// canonMaxDepth bounds container nesting. The scanner recurses once per
// level, and a request body is attacker-controlled, so the bound keeps a
// hostile payload from costing more than a small, fixed amount of stack.
// It also bounds the cost of reordering (see reorder): a 1 MiB body can
// cost at most 64 moves of itself. Real payloads nest a handful of levels;
// anything deeper is hashed raw, which is still deterministic.
const canonMaxDepth = 64

// canonicalJSON appends the canonical form of the JSON text src to dst.
// ok is false when src is not a single valid JSON value (RFC 8259) or nests
// deeper than canonMaxDepth; the caller then hashes the raw bytes instead.
//
// The canonical form exists so that two requests a client considers equal
// (same members, different order or formatting) get the same fingerprint,
// while requests a server could treat differently never do:
//   - insignificant whitespace is dropped;
//   - object members are ordered by their names as a decoder matches them
//     (decoded, then case-folded: see canonCompareNames), with a stable
//     sort, so members a decoder may take for one name (duplicates,
//     "amount" and "Amount") keep their relative order, and a decoder that
//     keeps the last of them sees the same value either way;
//   - strings are re-encoded with every escape decoded, escaping only '"',
//     '\\' and control characters (\b \f \n \r \t, else lowercase \u00xx);
//     a lone surrogate escape stays a lowercase \udxxx escape because it
//     has no UTF-8 form and must not collide with any other string;
//   - raw bytes >= 0x80 are copied untouched, valid UTF-8 or not;
//   - numbers keep their literal text, since servers may well distinguish
//     1.0 from 1 or 1e2 from 100.
//
// On failure out is dst with its original length (its capacity may have
// grown), so a reused buffer stays reusable. dst's spare capacity also
// serves as scratch space for reordering members, so in steady state, with
// a reused dst, canonicalJSON does not allocate.
func canonicalJSON(dst, src []byte) (out []byte, ok bool) {
	s := canonPool.Get().(*canonScanner)
	s.src, s.dst, s.pos = src, dst, 0
	s.spans = s.spans[:0]

	s.skipSpace()
	ok = s.value(0)
	if ok {
		s.skipSpace()
		ok = s.pos == len(src)
	}
	out = s.dst
	s.release()
	if !ok {
		return out[:len(dst)], false
	}
	return out, true
}

// canonPool recycles scanners so that the member-span scratch survives
// between calls; without it every object in every request would allocate.
var canonPool = sync.Pool{New: func() any { return new(canonScanner) }}

// canonMaxPooledSpans caps the scratch kept in the pool, so one huge
// payload does not pin its scratch memory for the life of the process.
const canonMaxPooledSpans = 1 << 12

// canonScanner is a single-pass recursive-descent scanner that validates
// src and writes its canonical form into dst as it goes. Output is produced
// in input order; objects are reordered in place once they close.
type canonScanner struct {
	src []byte
	pos int
	dst []byte
	// spans is a stack shared by all open objects: each object owns the
	// tail starting where it was when the object opened, and truncates it
	// back on close, so nesting needs no per-object allocation.
	spans []canonSpan
}

// canonSpan locates one canonicalised member inside dst: the key (with its
// quotes) is dst[key:colon], the whole member dst[key:end].
type canonSpan struct {
	key, colon, end int
}

// release drops references to caller memory before pooling the scanner.
func (s *canonScanner) release() {
	s.src, s.dst = nil, nil
	if cap(s.spans) > canonMaxPooledSpans {
		s.spans = nil
	}
	canonPool.Put(s)
}

// peek returns the current byte, or 0 at end of input; 0 is never valid
// where a token is expected, so callers need no separate bounds check.
func (s *canonScanner) peek() byte {
	if s.pos < len(s.src) {
		return s.src[s.pos]
	}
	return 0
}

func (s *canonScanner) skipSpace() {
	for s.pos < len(s.src) {
		switch c := s.src[s.pos]; {
		case c > ' ': // every token byte; compact payloads exit here at once
			return
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			s.pos++
		default:
			return
		}
	}
}

// value scans one value starting at s.pos; depth counts the containers
// already open around it.
func (s *canonScanner) value(depth int) bool {
	switch c := s.peek(); c {
	case '{':
		return depth < canonMaxDepth && s.object(depth+1)
	case '[':
		return depth < canonMaxDepth && s.array(depth+1)
	case '"':
		return s.str()
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return s.number()
		}
		return false
	}
}

func (s *canonScanner) literal(lit string) bool {
	if len(s.src)-s.pos < len(lit) || string(s.src[s.pos:s.pos+len(lit)]) != lit {
		return false
	}
	s.dst = append(s.dst, lit...)
	s.pos += len(lit)
	return true
}

// number validates the RFC 8259 number grammar and copies the literal as
// is: the scanner has no business deciding which spellings are equal.
func (s *canonScanner) number() bool {
	src, i := s.src, s.pos
	if i < len(src) && src[i] == '-' {
		i++
	}
	switch {
	case i < len(src) && src[i] == '0':
		i++
	case i < len(src) && src[i] >= '1' && src[i] <= '9':
		i = canonDigits(src, i+1)
	default:
		return false
	}
	if i < len(src) && src[i] == '.' {
		j := canonDigits(src, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		j := canonDigits(src, i)
		if j == i {
			return false
		}
		i = j
	}
	s.dst = append(s.dst, src[s.pos:i]...)
	s.pos = i
	return true
}

// canonDigits returns the index of the first non-digit at or after i.
func canonDigits(src []byte, i int) int {
	for i < len(src) && src[i] >= '0' && src[i] <= '9' {
		i++
	}
	return i
}

func (s *canonScanner) array(depth int) bool {
	s.pos++
	s.dst = append(s.dst, '[')
	s.skipSpace()
	if s.peek() == ']' {
		s.pos++
		s.dst = append(s.dst, ']')
		return true
	}
	for {
		if !s.value(depth) {
			return false
		}
		s.skipSpace()
		switch s.peek() {
		case ',':
			s.pos++
			s.dst = append(s.dst, ',')
			s.skipSpace()
		case ']':
			s.pos++
			s.dst = append(s.dst, ']')
			return true
		default:
			return false
		}
	}
}

func (s *canonScanner) object(depth int) bool {
	s.pos++
	open := len(s.dst)
	s.dst = append(s.dst, '{')
	s.skipSpace()
	if s.peek() == '}' {
		s.pos++
		s.dst = append(s.dst, '}')
		return true
	}
	base := len(s.spans)
	sorted := true
	for {
		if s.peek() != '"' {
			return false
		}
		key := len(s.dst)
		if !s.str() {
			return false
		}
		colon := len(s.dst)
		s.skipSpace()
		if s.peek() != ':' {
			return false
		}
		s.pos++
		s.dst = append(s.dst, ':')
		s.skipSpace()
		if !s.value(depth) {
			return false
		}
		m := canonSpan{key: key, colon: colon, end: len(s.dst)}
		// Most payloads are produced by encoders that already emit sorted
		// keys (or have one member), so track sortedness while scanning and
		// skip the reorder entirely in that case.
		if sorted && len(s.spans) > base && s.compareSpans(s.spans[len(s.spans)-1], m) > 0 {
			sorted = false
		}
		s.spans = append(s.spans, m)
		s.skipSpace()
		switch s.peek() {
		case ',':
			s.pos++
			s.dst = append(s.dst, ',')
			s.skipSpace()
		case '}':
			s.pos++
			if !sorted {
				s.reorder(open+1, s.spans[base:])
			}
			s.spans = s.spans[:base]
			s.dst = append(s.dst, '}')
			return true
		default:
			return false
		}
	}
}

// reorder sorts the members of the object whose body (members and commas)
// is dst[body:] and rewrites the body in that order. The body is first
// copied past the end of dst, so the caller's buffer doubles as the scratch
// space: it is reused across calls, which keeps the common path free of
// allocations without pooling a second buffer.
//
// Each unsorted object moves its whole body once, so the total work is
// bounded by the payload size times the nesting depth of unsorted objects,
// which canonMaxDepth caps; sorted objects, the common case, move nothing.
func (s *canonScanner) reorder(body int, members []canonSpan) {
	if len(members) <= canonInsertionSort {
		// The few members of a usual object: an insertion sort, stable
		// since a member moves only past those greater than it, and
		// without the generic sort's indirect calls.
		for i := 1; i < len(members); i++ {
			m := members[i]
			j := i
			for ; j > 0 && s.compareSpans(members[j-1], m) > 0; j-- {
				members[j] = members[j-1]
			}
			members[j] = m
		}
	} else {
		slices.SortStableFunc(members, s.compareSpans)
	}
	end := len(s.dst)
	s.dst = append(s.dst, s.dst[body:end]...)
	shift := end - body
	w := body
	for i, m := range members {
		if i > 0 {
			s.dst[w] = ','
			w++
		}
		w += copy(s.dst[w:], s.dst[m.key+shift:m.end+shift])
	}
	s.dst = s.dst[:end]
}

// canonInsertionSort is the most members reorder sorts by insertion; more
// go to slices.SortStableFunc, whose cost grows as n log n, not n squared,
// whatever a hostile payload holds.
const canonInsertionSort = 12

// compareSpans orders two members by the names a decoder matches them by
// (see canonCompareNames); members it finds equal keep their input order.
func (s *canonScanner) compareSpans(a, b canonSpan) int {
	// The key bodies without their quotes: with them, "a" would sort after
	// "a!" because the closing '"' is greater than '!'.
	return canonCompareNames(s.dst[a.key+1:a.colon-1], s.dst[b.key+1:b.colon-1])
}

// canonSafe marks the string bytes that are copied through unchanged.
var canonSafe = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str scans a string starting at its opening quote and writes its normal
// form. Runs of bytes needing no change are found a word at a time and
// copied in one append.
func (s *canonScanner) str() bool {
	src := s.src
	i := s.pos + 1
	s.dst = append(s.dst, '"')
	for {
		start := i
		for i+8 <= len(src) && !canonWordSpecial(binary.LittleEndian.Uint64(src[i:])) {
			i += 8
		}
		for i < len(src) && canonSafe[src[i]] {
			i++
		}
		s.dst = append(s.dst, src[start:i]...)
		if i >= len(src) {
			return false
		}
		switch src[i] {
		case '"':
			s.dst = append(s.dst, '"')
			s.pos = i + 1
			return true
		case '\\':
			n := s.escape(src[i:])
			if n == 0 {
				return false
			}
			i += n
		default: // raw control character
			return false
		}
	}
}

// canonWordSpecial reports whether any of the eight bytes in w is '"', '\\'
// or a control character (the classic SWAR zero-byte and less-than tests;
// they are exact about whether such a byte exists, which is all we need).
func canonWordSpecial(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote := w ^ ('"' * ones)
	backslash := w ^ ('\\' * ones)
	control := (w - 0x20*ones) &^ w
	quote = (quote - ones) &^ quote
	backslash = (backslash - ones) &^ backslash
	return (control|quote|backslash)&highs != 0
}

// escape decodes the escape sequence at the start of e (which begins with a
// backslash), writes its normal form, and returns how many bytes it used,
// or 0 if the escape is invalid.
func (s *canonScanner) escape(e []byte) int {
	if len(e) < 2 {
		return 0
	}
	switch e[1] {
	case '"', '\\', 'b', 'f', 'n', 'r', 't': // already in normal form
		s.dst = append(s.dst, e[:2]...)
		return 2
	case '/':
		s.dst = append(s.dst, '/')
		return 2
	case 'u':
		return s.unicodeEscape(e)
	}
	return 0
}

// unicodeEscape is escape for a \u sequence, which may be the first half of
// a surrogate pair.
func (s *canonScanner) unicodeEscape(e []byte) int {
	r, ok := canonHex4(e[2:])
	if !ok {
		return 0
	}
	switch {
	case r < utf8.RuneSelf:
		s.dst = canonAppendASCII(s.dst, byte(r))
		return 6
	case r < 0xd800 || r > 0xdfff:
		s.dst = utf8.AppendRune(s.dst, r)
		return 6
	case r < 0xdc00 && len(e) >= 12 && e[6] == '\\' && e[7] == 'u':
		if lo, ok := canonHex4(e[8:]); ok && lo >= 0xdc00 && lo <= 0xdfff {
			s.dst = utf8.AppendRune(s.dst, 0x10000+(r-0xd800)<<10+(lo-0xdc00))
			return 12
		}
	}
	// A lone surrogate has no UTF-8 encoding; keeping it escaped (in one
	// spelling) leaves it distinct from U+FFFD and from every other string.
	// Whatever follows is scanned on its own, so an invalid escape after a
	// high surrogate still fails the document.
	s.dst = append(s.dst, '\\', 'u',
		canonHexDigits[r>>12], canonHexDigits[r>>8&0xf],
		canonHexDigits[r>>4&0xf], canonHexDigits[r&0xf])
	return 6
}

const canonHexDigits = "0123456789abcdef"

// canonAppendASCII appends the normal form of an ASCII character that came
// from a \u escape.
func canonAppendASCII(dst []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(dst, '\\', c)
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	if c < 0x20 {
		return append(dst, '\\', 'u', '0', '0', canonHexDigits[c>>4], canonHexDigits[c&0xf])
	}
	return append(dst, c)
}

// canonHex4 parses the four hex digits at the start of h.
func canonHex4(h []byte) (rune, bool) {
	if len(h) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range h[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// canonCompareNames orders two canonical member names (key bodies without
// quotes) by the name encoding/json may match each one as, and returns 0
// for two names it may take for the same one. encoding/json decodes a name
// with every invalid UTF-8 byte and every lone surrogate escape turned into
// U+FFFD, then matches struct fields case-insensitively with Unicode simple
// folding ("Amount" and "amount" are one field, as are "s" and "ſ", or "k"
// and the Kelvin sign), and the last member that matches wins. Members
// whose names compare equal are therefore left in their input order by the
// stable sort: swapping them could change the value a decoder keeps.
// Other members are ordered by their folded names, so that otherwise the
// order of members in a request does not matter.
func canonCompareNames(a, b []byte) int {
	// Names are mostly plain ASCII: while both are, a byte is a rune and
	// its fold is its upper case, so they are compared a byte at a time
	// here, and by canonNameReader from the first byte that is not.
	n := min(len(a), len(b))
	i := 0
	for ; i < n; i++ {
		ca, cb := a[i], b[i]
		if ca >= utf8.RuneSelf || cb >= utf8.RuneSelf || ca == '\\' || cb == '\\' {
			break
		}
		if ca == cb {
			continue
		}
		ca, cb = canonUpper(ca), canonUpper(cb)
		switch {
		case ca < cb:
			return -1
		case ca > cb:
			return 1
		}
	}
	if i == n {
		return cmp.Compare(len(a), len(b))
	}
	return canonCompareNamesSlow(a[i:], b[i:])
}

// canonUpper is the upper case of an ASCII letter, any other byte itself:
// the fold canonNameReader gives an ASCII byte.
func canonUpper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - ('a' - 'A')
	}
	return c
}

// canonCompareNamesSlow is canonCompareNames rune by rune, as decoded and
// folded by canonNameReader, for names with escapes or non-ASCII bytes.
func canonCompareNamesSlow(a, b []byte) int {
	ra, rb := canonNameReader{rest: a}, canonNameReader{rest: b}
	for {
		ca, oka := ra.next()
		cb, okb := rb.next()
		switch {
		case !oka && !okb:
			return 0
		case !oka:
			return -1
		case !okb:
			return 1
		case ca != cb:
			if ca < cb {
				return -1
			}
			return 1
		}
	}
}

// canonNameReader yields the folded runes of a canonical member name as
// encoding/json decodes and folds it. It only has to understand the escapes
// the scanner itself emits: the short ones, \u00xx for other control
// characters, and \udxxx for a lone surrogate.
type canonNameReader struct {
	rest []byte
}

func (r *canonNameReader) next() (rune, bool) {
	if len(r.rest) == 0 {
		return 0, false
	}
	c := r.rest[0]
	switch {
	case c == '\\':
		e := r.rest[1]
		if e != 'u' {
			r.rest = r.rest[2:]
			return rune(canonUnescape(e)), true
		}
		u, _ := canonHex4(r.rest[2:])
		r.rest = r.rest[6:]
		if u >= 0xd800 && u <= 0xdfff {
			return utf8.RuneError, true // a lone surrogate decodes to U+FFFD
		}
		return u, true
	case c < utf8.RuneSelf:
		r.rest = r.rest[1:]
		return rune(canonUpper(c)), true
	}
	u, n := utf8.DecodeRune(r.rest) // an invalid byte is U+FFFD, one byte long
	r.rest = r.rest[n:]
	return canonFoldRune(u), true
}

// canonFoldRune returns the smallest rune of r's simple case-folding orbit:
// two runes a decoder matches case-insensitively fold to the same one.
func canonFoldRune(r rune) rune {
	for {
		next := unicode.SimpleFold(r)
		if next <= r {
			return next
		}
		r = next
	}
}

// canonUnescape maps the character after a backslash in a two-byte escape
// to the byte it stands for.
func canonUnescape(e byte) byte {
	switch e {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return e // '"' or '\\'
}
