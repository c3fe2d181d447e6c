package idem

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// sfMaxKeyLen is the longest idempotency key ParseKey accepts, in bytes (keys
// are ASCII, so bytes and characters coincide). The bound keeps store keys
// and log lines small whatever a client sends.
const sfMaxKeyLen = 255

// ParseKey returns the idempotency key carried by the field lines of an
// Idempotency-Key header (one string per field line, as http.Header holds them).
//
// The IETF draft (draft-ietf-httpapi-idempotency-key-header) defines the
// field as an RFC 9651 Item whose bare item is a String, so the canonical
// form is a quoted string such as "8e03978e-40d5-43e8-bc93-6894a57f9324".
// Escapes are decoded and item parameters are validated but ignored.
//
// Many clients send the key unquoted. When strict is false such a bare key is
// accepted as is, provided it is made only of A-Z a-z 0-9 and "-_.~:+/="
// (the characters of UUIDs, ULIDs and base64/base64url tokens); in that mode
// surrounding SP and HTAB are ignored for both forms. When strict is true
// only an sf-string is a key, parsed exactly as RFC 9651 says (surrounding SP
// only; a tab is a control character and is rejected).
//
// No header at all yields ErrKeyMissing. Every other rejection wraps
// ErrKeyInvalid with a short reason that is safe to show to the client: it
// never quotes the offending value.
func ParseKey(lines []string, strict bool) (string, error) {
	switch len(lines) {
	case 0:
		return "", ErrKeyMissing
	case 1:
	default:
		// Combining lines would turn two keys into a list, and picking one
		// would silently ignore the other: neither identifies one request.
		return "", sfKeyError("more than one Idempotency-Key field line")
	}
	v := lines[0]
	if !strict {
		v = sfTrimOWS(v)
		if sfIsBareKey(v) {
			if len(v) > sfMaxKeyLen {
				return "", sfKeyError("key longer than 255 characters")
			}
			return v, nil
		}
	}
	if strings.TrimLeft(v, " ") == "" {
		return "", sfKeyError("empty Idempotency-Key field")
	}
	p := sfParser{s: v}
	p.skipSP()
	if p.s[p.i] != '"' {
		if strict {
			return "", sfKeyError("key is not a quoted string")
		}
		return "", sfKeyError("key is neither a quoted string nor made of A-Z a-z 0-9 - _ . ~ : + / =")
	}
	item, err := p.item(false)
	if err != nil {
		return "", sfKeyError(err.Error())
	}
	switch key := item.bare.str; {
	case key == "":
		return "", sfKeyError("empty key")
	case len(key) > sfMaxKeyLen:
		return "", sfKeyError("key longer than 255 characters")
	default:
		return key, nil
	}
}

// sfKeyError builds a ParseKey rejection. Reasons are fixed strings so that
// no client-controlled bytes are echoed back in error responses or logs.
func sfKeyError(reason string) error {
	return fmt.Errorf("%w: %s", ErrKeyInvalid, reason)
}

// sfTrimOWS removes HTTP optional whitespace (SP and HTAB) at both ends.
func sfTrimOWS(s string) string {
	return strings.Trim(s, " \t")
}

// sfIsBareKey reports whether s is a non-empty run of the characters that
// lenient mode accepts unquoted. The set is deliberately narrow: it covers
// common key formats while excluding everything with meaning in RFC 9651
// syntax that could make the same bytes read differently (quotes, ";", ",",
// "?", "@", "%", whitespace).
func sfIsBareKey(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '_', c == '.', c == '~', c == ':', c == '+', c == '/', c == '=':
		default:
			return false
		}
	}
	return true
}

// sfKind is the type of an RFC 9651 bare item.
type sfKind uint8

const (
	sfInvalid sfKind = iota
	sfInteger
	sfDecimal
	sfString
	sfToken
	sfByteSeq
	sfBoolean
	sfDate
	sfDisplayString
)

var sfKindNames = [...]string{
	sfInvalid:       "invalid",
	sfInteger:       "integer",
	sfDecimal:       "decimal",
	sfString:        "string",
	sfToken:         "token",
	sfByteSeq:       "byte sequence",
	sfBoolean:       "boolean",
	sfDate:          "date",
	sfDisplayString: "display string",
}

func (k sfKind) String() string {
	if int(k) < len(sfKindNames) {
		return sfKindNames[k]
	}
	return "invalid"
}

// sfBareItem is one parsed RFC 9651 bare item. Only the fields that belong to
// kind are meaningful.
type sfBareItem struct {
	kind sfKind
	// num holds an Integer or a Date, or a Decimal scaled by 1000: RFC 9651
	// caps decimals at three fractional digits, so the scaled value is exact
	// and fits comfortably in an int64 (at most 15 digits).
	num     int64
	boolean bool
	str     string // String, Token or Display String
	bytes   []byte // Byte Sequence
}

// sfParam is one item parameter, in the order it first appeared.
type sfParam struct {
	key   string
	value sfBareItem
}

// sfItem is a parsed RFC 9651 Item: a bare item and its parameters.
type sfItem struct {
	bare   sfBareItem
	params []sfParam
}

// Syntax errors of the parser. Their texts become the reason ParseKey gives
// clients, so they describe the problem without quoting the input.
var (
	errSFEmpty          = errors.New("empty field value")
	errSFNoItem         = errors.New("value does not start a structured field item")
	errSFTrailing       = errors.New("unexpected characters after the value")
	errSFList           = errors.New("a comma-separated list of values, not a single key")
	errSFNumber         = errors.New("malformed number")
	errSFNumberTooLong  = errors.New("number has too many digits")
	errSFUnterminated   = errors.New("unterminated string")
	errSFBadEscape      = errors.New("invalid escape in string (only \\\" and \\\\ are allowed)")
	errSFStringChar     = errors.New("string contains a control or non-ASCII character")
	errSFByteSeq        = errors.New("malformed byte sequence")
	errSFBoolean        = errors.New("malformed boolean")
	errSFDate           = errors.New("malformed date")
	errSFDisplayString  = errors.New("malformed display string")
	errSFParameterKey   = errors.New("malformed parameter key")
	errSFParameterValue = errors.New("malformed parameter value")
)

// sfParser walks its input once, left to right, as the algorithms of RFC 9651
// §4.2 do. It works on bytes: every valid character is ASCII, so any byte
// >= 0x80 is simply never accepted by any production.
type sfParser struct {
	s string
	i int
}

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

// item parses a whole field value as an Item. Parameters are always
// validated, but only stored when keepParams is set, so ParseKey's common
// path does not allocate for them.
func (p *sfParser) item(keepParams bool) (sfItem, error) {
	var it sfItem
	p.skipSP()
	if p.i == len(p.s) {
		return it, errSFEmpty
	}
	bare, err := p.bareItem()
	if err != nil {
		return it, err
	}
	it.bare = bare
	if it.params, err = p.parameters(keepParams); err != nil {
		return it, err
	}
	p.skipSP()
	if p.i < len(p.s) {
		if p.s[p.i] == ',' {
			return it, errSFList
		}
		return it, errSFTrailing
	}
	return it, nil
}

// bareItem implements §4.2.3.1: the first character decides the type.
func (p *sfParser) bareItem() (sfBareItem, error) {
	if p.i >= len(p.s) {
		return sfBareItem{}, errSFNoItem
	}
	switch c := p.s[p.i]; {
	case c == '-' || sfIsDigit(c):
		return p.number()
	case c == '"':
		s, err := p.str()
		return sfBareItem{kind: sfString, str: s}, err
	case c == '*' || sfIsAlpha(c):
		return p.token(), nil
	case c == ':':
		return p.byteSeq()
	case c == '?':
		return p.boolean()
	case c == '@':
		p.i++
		n, err := p.number()
		if err != nil {
			return sfBareItem{}, err
		}
		if n.kind != sfInteger {
			return sfBareItem{}, errSFDate
		}
		n.kind = sfDate
		return n, nil
	case c == '%':
		return p.displayString()
	default:
		return sfBareItem{}, errSFNoItem
	}
}

// parameters implements §4.2.3.2. A repeated key keeps its first position
// and takes the last value, as the RFC's ordered map does.
func (p *sfParser) parameters(keep bool) ([]sfParam, error) {
	var params []sfParam
	for p.i < len(p.s) && p.s[p.i] == ';' {
		p.i++
		p.skipSP()
		key, err := p.key()
		if err != nil {
			return nil, err
		}
		value := sfBareItem{kind: sfBoolean, boolean: true}
		if p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
			if value, err = p.bareItem(); err != nil {
				if err == errSFNoItem {
					err = errSFParameterValue
				}
				return nil, err
			}
		}
		if !keep {
			continue
		}
		replaced := false
		for j := range params {
			if params[j].key == key {
				params[j].value = value
				replaced = true
				break
			}
		}
		if !replaced {
			params = append(params, sfParam{key: key, value: value})
		}
	}
	return params, nil
}

// key implements §4.2.3.3.
func (p *sfParser) key() (string, error) {
	start := p.i
	if p.i >= len(p.s) || !(sfIsLCAlpha(p.s[p.i]) || p.s[p.i] == '*') {
		return "", errSFParameterKey
	}
	p.i++
	for p.i < len(p.s) {
		c := p.s[p.i]
		if !(sfIsLCAlpha(c) || sfIsDigit(c) || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

// number implements §4.2.4 (Integer or Decimal) and enforces its digit
// limits, which are what keep every value exactly representable.
func (p *sfParser) number() (sfBareItem, error) {
	neg := false
	if p.i < len(p.s) && p.s[p.i] == '-' {
		neg = true
		p.i++
	}
	if p.i >= len(p.s) || !sfIsDigit(p.s[p.i]) {
		return sfBareItem{}, errSFNumber
	}
	var (
		n         int64
		digits    int // integer-part digits
		frac      int // fractional digits, once isDecimal
		isDecimal bool
	)
scan:
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case sfIsDigit(c):
			n = n*10 + int64(c-'0')
			if isDecimal {
				frac++
				if frac > 3 {
					return sfBareItem{}, errSFNumberTooLong
				}
			} else {
				digits++
				if digits > 15 {
					return sfBareItem{}, errSFNumberTooLong
				}
			}
		case c == '.' && !isDecimal:
			if digits > 12 {
				return sfBareItem{}, errSFNumberTooLong
			}
			isDecimal = true
		default:
			break scan
		}
		p.i++
	}
	if neg {
		n = -n
	}
	if !isDecimal {
		return sfBareItem{kind: sfInteger, num: n}, nil
	}
	if frac == 0 {
		return sfBareItem{}, errSFNumber // a decimal may not end in '.'
	}
	for ; frac < 3; frac++ {
		n *= 10
	}
	return sfBareItem{kind: sfDecimal, num: n}, nil
}

// str implements §4.2.5. Without escapes the result is a substring of the
// input, which is what keeps ParseKey's common case allocation-free.
func (p *sfParser) str() (string, error) {
	p.i++ // opening DQUOTE
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return p.s[start : p.i-1], nil
		case c == '\\':
			return p.escapedStr(start)
		case c < 0x20 || c > 0x7e:
			return "", errSFStringChar
		}
		p.i++
	}
	return "", errSFUnterminated
}

// escapedStr finishes a string whose first escape is at p.i, copying into a
// buffer sized for the rest of the input so it grows at most once.
func (p *sfParser) escapedStr(start int) (string, error) {
	var b strings.Builder
	b.Grow(len(p.s) - start)
	b.WriteString(p.s[start:p.i])
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i >= len(p.s) {
				return "", errSFUnterminated
			}
			next := p.s[p.i]
			p.i++
			if next != '"' && next != '\\' {
				return "", errSFBadEscape
			}
			b.WriteByte(next)
		case c == '"':
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", errSFStringChar
		default:
			b.WriteByte(c)
		}
	}
	return "", errSFUnterminated
}

// token implements §4.2.6; the caller has checked the first character.
func (p *sfParser) token() sfBareItem {
	start := p.i
	p.i++
	for p.i < len(p.s) && sfIsTokenChar(p.s[p.i]) {
		p.i++
	}
	return sfBareItem{kind: sfToken, str: p.s[start:p.i]}
}

// byteSeq implements §4.2.7. Following the RFC's advice, missing "="
// padding and non-zero pad bits are tolerated, but a misplaced or excess
// "=" and anything outside the standard base64 alphabet are not.
func (p *sfParser) byteSeq() (sfBareItem, error) {
	p.i++ // opening ':'
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return sfBareItem{}, errSFByteSeq
	}
	content := p.s[p.i : p.i+end]
	p.i += end + 1
	data := strings.TrimRight(content, "=")
	pad := len(content) - len(data)
	for i := 0; i < len(data); i++ {
		if !sfIsBase64Char(data[i]) {
			return sfBareItem{}, errSFByteSeq
		}
	}
	// Padding, when present, must be exactly what completes the last quantum.
	if len(data)%4 == 1 || pad > 2 || (pad != 0 && (len(data)+pad)%4 != 0) {
		return sfBareItem{}, errSFByteSeq
	}
	out, err := base64.RawStdEncoding.DecodeString(data)
	if err != nil {
		return sfBareItem{}, errSFByteSeq
	}
	return sfBareItem{kind: sfByteSeq, bytes: out}, nil
}

// boolean implements §4.2.8.
func (p *sfParser) boolean() (sfBareItem, error) {
	p.i++ // '?'
	if p.i < len(p.s) {
		switch p.s[p.i] {
		case '1':
			p.i++
			return sfBareItem{kind: sfBoolean, boolean: true}, nil
		case '0':
			p.i++
			return sfBareItem{kind: sfBoolean}, nil
		}
	}
	return sfBareItem{}, errSFBoolean
}

// displayString implements §4.2.10: printable ASCII with lowercase %xx
// escapes that must decode to valid UTF-8.
func (p *sfParser) displayString() (sfBareItem, error) {
	if p.i+1 >= len(p.s) || p.s[p.i+1] != '"' {
		return sfBareItem{}, errSFDisplayString
	}
	p.i += 2
	var buf []byte
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c < 0x20 || c > 0x7e:
			return sfBareItem{}, errSFDisplayString
		case c == '%':
			if p.i+2 > len(p.s) {
				return sfBareItem{}, errSFDisplayString
			}
			hi, ok1 := sfLowerHex(p.s[p.i])
			lo, ok2 := sfLowerHex(p.s[p.i+1])
			if !ok1 || !ok2 {
				return sfBareItem{}, errSFDisplayString
			}
			p.i += 2
			buf = append(buf, hi<<4|lo)
		case c == '"':
			if !utf8.Valid(buf) {
				return sfBareItem{}, errSFDisplayString
			}
			return sfBareItem{kind: sfDisplayString, str: string(buf)}, nil
		default:
			buf = append(buf, c)
		}
	}
	return sfBareItem{}, errSFDisplayString
}

func sfIsDigit(c byte) bool   { return '0' <= c && c <= '9' }
func sfIsLCAlpha(c byte) bool { return 'a' <= c && c <= 'z' }
func sfIsAlpha(c byte) bool   { return sfIsLCAlpha(c) || ('A' <= c && c <= 'Z') }

func sfIsBase64Char(c byte) bool {
	return sfIsAlpha(c) || sfIsDigit(c) || c == '+' || c == '/'
}

// sfIsTokenChar reports whether c may continue a Token: RFC 9110 tchar plus
// ":" and "/".
func sfIsTokenChar(c byte) bool {
	if sfIsAlpha(c) || sfIsDigit(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~', ':', '/':
		return true
	}
	return false
}

// sfLowerHex decodes one lowercase hex digit; RFC 9651 rejects uppercase
// in Display Strings so that every string has a single serialisation.
func sfLowerHex(c byte) (byte, bool) {
	switch {
	case sfIsDigit(c):
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
