package idem

import (
	"bytes"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// sfKeyWant is the expected outcome of ParseKey in one mode: either a key or
// an error that the result must match with errors.Is.
type sfKeyWant struct {
	key string
	err error
}

func sfWantKey(k string) sfKeyWant { return sfKeyWant{key: k} }

var (
	sfWantInvalid = sfKeyWant{err: ErrKeyInvalid}
	sfWantMissing = sfKeyWant{err: ErrKeyMissing}
)

const sfUUID = "8e03978e-40d5-43e8-bc93-6894a57f9324"

func TestParseKey(t *testing.T) {
	a255 := strings.Repeat("a", 255)
	a256 := strings.Repeat("a", 256)
	tests := []struct {
		name    string
		lines   []string
		lenient sfKeyWant
		strict  sfKeyWant
	}{
		// Presence and field lines.
		{"no header", nil, sfWantMissing, sfWantMissing},
		{"empty line slice", []string{}, sfWantMissing, sfWantMissing},
		{"two field lines", []string{`"a"`, `"b"`}, sfWantInvalid, sfWantInvalid},
		{"two identical field lines", []string{`"a"`, `"a"`}, sfWantInvalid, sfWantInvalid},
		{"empty field value", []string{""}, sfWantInvalid, sfWantInvalid},
		{"blank field value", []string{"   "}, sfWantInvalid, sfWantInvalid},
		{"tab-only field value", []string{"\t"}, sfWantInvalid, sfWantInvalid},

		// sf-strings.
		{"quoted uuid", []string{`"` + sfUUID + `"`}, sfWantKey(sfUUID), sfWantKey(sfUUID)},
		{"quoted single char", []string{`"x"`}, sfWantKey("x"), sfWantKey("x")},
		{"quoted with surrounding SP", []string{`  "abc"   `}, sfWantKey("abc"), sfWantKey("abc")},
		{"quoted with surrounding HTAB", []string{"\t\"abc\"\t"}, sfWantKey("abc"), sfWantInvalid},
		{"spaces inside quotes kept", []string{`" a b "`}, sfWantKey(" a b "), sfWantKey(" a b ")},
		{"only a space inside quotes", []string{`" "`}, sfWantKey(" "), sfWantKey(" ")},
		{"escaped quote", []string{`"a\"b"`}, sfWantKey(`a"b`), sfWantKey(`a"b`)},
		{"escaped backslash", []string{`"a\\b"`}, sfWantKey(`a\b`), sfWantKey(`a\b`)},
		{"only escapes", []string{`"\\\""`}, sfWantKey(`\"`), sfWantKey(`\"`)},
		{"all printable ASCII", []string{sfQuote(sfPrintable())}, sfWantKey(sfPrintable()), sfWantKey(sfPrintable())},
		{"comma inside quotes", []string{`"a, b"`}, sfWantKey("a, b"), sfWantKey("a, b")},
		{"semicolon inside quotes", []string{`"a;b=1"`}, sfWantKey("a;b=1"), sfWantKey("a;b=1")},
		{"quoted 255 chars", []string{sfQuote(a255)}, sfWantKey(a255), sfWantKey(a255)},
		{"quoted 255 chars after decoding", []string{`"` + a255[1:] + `\\"`}, sfWantKey(a255[1:] + `\`), sfWantKey(a255[1:] + `\`)},
		{"quoted 256 chars", []string{sfQuote(a256)}, sfWantInvalid, sfWantInvalid},
		{"quoted 256 chars after decoding", []string{`"` + a255 + `\\"`}, sfWantInvalid, sfWantInvalid},
		{"empty quoted string", []string{`""`}, sfWantInvalid, sfWantInvalid},
		{"empty quoted string with params", []string{`"";a=1`}, sfWantInvalid, sfWantInvalid},

		// Parameters: validated, then ignored.
		{"integer parameter", []string{`"abc";v=1`}, sfWantKey("abc"), sfWantKey("abc")},
		{"boolean-true parameter", []string{`"abc";v`}, sfWantKey("abc"), sfWantKey("abc")},
		{"many parameters with SP", []string{`"abc"; v=1;  w="x;y"; *z.-_9=?0;t=tok;d=1.5;b=:aGk=:;e=@1;s=%"x"`}, sfWantKey("abc"), sfWantKey("abc")},
		{"repeated parameter", []string{`"abc";a=1;a=2`}, sfWantKey("abc"), sfWantKey("abc")},
		{"SP before semicolon", []string{`"abc" ;v=1`}, sfWantInvalid, sfWantInvalid},
		{"SP before equals", []string{`"abc";v =1`}, sfWantInvalid, sfWantInvalid},
		{"SP after equals", []string{`"abc";v= 1`}, sfWantInvalid, sfWantInvalid},
		{"dangling semicolon", []string{`"abc";`}, sfWantInvalid, sfWantInvalid},
		{"uppercase parameter key", []string{`"abc";V=1`}, sfWantInvalid, sfWantInvalid},
		{"digit-first parameter key", []string{`"abc";1v=1`}, sfWantInvalid, sfWantInvalid},
		{"missing parameter value", []string{`"abc";v=`}, sfWantInvalid, sfWantInvalid},
		{"malformed parameter value", []string{`"abc";v=1.`}, sfWantInvalid, sfWantInvalid},
		{"16-digit parameter value", []string{`"abc";v=1234567890123456`}, sfWantInvalid, sfWantInvalid},
		{"unterminated parameter string", []string{`"abc";v="x`}, sfWantInvalid, sfWantInvalid},

		// Bare keys: lenient only.
		{"bare uuid", []string{sfUUID}, sfWantKey(sfUUID), sfWantInvalid},
		{"bare full charset", []string{"AZaz09-_.~:+/="}, sfWantKey("AZaz09-_.~:+/="), sfWantInvalid},
		{"bare with surrounding OWS", []string{" \t" + sfUUID + "\t "}, sfWantKey(sfUUID), sfWantInvalid},
		{"bare 255 chars", []string{a255}, sfWantKey(a255), sfWantInvalid},
		{"bare 256 chars", []string{a256}, sfWantInvalid, sfWantInvalid},
		{"bare token-like", []string{"abc"}, sfWantKey("abc"), sfWantInvalid},
		{"bare digits", []string{"123"}, sfWantKey("123"), sfWantInvalid},
		{"bare decimal-like", []string{"1.5"}, sfWantKey("1.5"), sfWantInvalid},
		// The lenient charset includes ':' and '=', so a byte-sequence-shaped
		// value is an acceptable bare key; strict mode sees a Byte Sequence.
		{"byte sequence", []string{":aGk=:"}, sfWantKey(":aGk=:"), sfWantInvalid},
		{"bare with inner space", []string{"abc def"}, sfWantInvalid, sfWantInvalid},
		{"bare with inner tab", []string{"abc\tdef"}, sfWantInvalid, sfWantInvalid},
		{"bare with comma", []string{"a,b"}, sfWantInvalid, sfWantInvalid},
		{"bare with non-ASCII", []string{"café"}, sfWantInvalid, sfWantInvalid},
		{"bare with DEL", []string{"abc\x7f"}, sfWantInvalid, sfWantInvalid},

		// Other item types: never keys.
		{"token with parameter", []string{"abc;x"}, sfWantInvalid, sfWantInvalid},
		{"token with star", []string{"*abc"}, sfWantInvalid, sfWantInvalid},
		{"boolean", []string{"?1"}, sfWantInvalid, sfWantInvalid},
		{"date", []string{"@1659578233"}, sfWantInvalid, sfWantInvalid},
		{"display string", []string{`%"abc"`}, sfWantInvalid, sfWantInvalid},
		{"integer with parameter", []string{"1;a"}, sfWantInvalid, sfWantInvalid},
		{"single quotes", []string{"'abc'"}, sfWantInvalid, sfWantInvalid},

		// Malformed strings.
		{"non-ASCII in quotes", []string{`"café"`}, sfWantInvalid, sfWantInvalid},
		{"tab in quotes", []string{"\"a\tb\""}, sfWantInvalid, sfWantInvalid},
		{"CR in quotes", []string{"\"a\rb\""}, sfWantInvalid, sfWantInvalid},
		{"LF in quotes", []string{"\"a\nb\""}, sfWantInvalid, sfWantInvalid},
		{"NUL in quotes", []string{"\"a\x00b\""}, sfWantInvalid, sfWantInvalid},
		{"DEL in quotes", []string{"\"a\x7fb\""}, sfWantInvalid, sfWantInvalid},
		{"control char after escape", []string{"\"a\\\"\x01\""}, sfWantInvalid, sfWantInvalid},
		{"bad escape", []string{`"a\b"`}, sfWantInvalid, sfWantInvalid},
		{"escaped non-ASCII", []string{"\"a\\\xc3\xa9\""}, sfWantInvalid, sfWantInvalid},
		{"escape at end", []string{`"a\`}, sfWantInvalid, sfWantInvalid},
		{"escaped closing quote", []string{`"a\"`}, sfWantInvalid, sfWantInvalid},
		{"unterminated", []string{`"abc`}, sfWantInvalid, sfWantInvalid},
		{"lone quote", []string{`"`}, sfWantInvalid, sfWantInvalid},
		{"trailing junk", []string{`"abc"x`}, sfWantInvalid, sfWantInvalid},
		{"two strings", []string{`"abc" "def"`}, sfWantInvalid, sfWantInvalid},
		{"comma-joined list", []string{`"a", "b"`}, sfWantInvalid, sfWantInvalid},
		{"trailing comma", []string{`"a",`}, sfWantInvalid, sfWantInvalid},
		{"leading comma", []string{`, "a"`}, sfWantInvalid, sfWantInvalid},
		{"trailing CRLF", []string{"\"abc\"\r\n"}, sfWantInvalid, sfWantInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, mode := range []struct {
				strict bool
				want   sfKeyWant
			}{{false, tt.lenient}, {true, tt.strict}} {
				got, err := ParseKey(tt.lines, mode.strict)
				if mode.want.err != nil {
					if !errors.Is(err, mode.want.err) {
						t.Errorf("ParseKey(%q, strict=%v) = %q, %v; want error %v", tt.lines, mode.strict, got, err, mode.want.err)
					} else if got != "" {
						t.Errorf("ParseKey(%q, strict=%v) returned key %q with its error", tt.lines, mode.strict, got)
					}
					continue
				}
				if err != nil || got != mode.want.key {
					t.Errorf("ParseKey(%q, strict=%v) = %q, %v; want %q", tt.lines, mode.strict, got, err, mode.want.key)
				}
			}
		})
	}
}

// TestParseKeyErrorsDoNotEchoValue guards the promise that rejection reasons
// are safe to return to clients and to log.
func TestParseKeyErrorsDoNotEchoValue(t *testing.T) {
	const secret = "s3cr3t-value"
	values := []string{
		`"` + secret,
		`"` + secret + `"x`,
		`"` + secret + `", "b"`,
		`"` + secret + `\q"`,
		`"` + secret + `";K=1`,
		secret + " x",
		secret + ";x",
		`"` + strings.Repeat(secret, 30) + `"`,
		strings.Repeat(secret, 30),
		"\"" + secret + "\x00\"",
	}
	for _, v := range values {
		for _, strict := range []bool{false, true} {
			_, err := ParseKey([]string{v}, strict)
			if !errors.Is(err, ErrKeyInvalid) {
				t.Errorf("ParseKey(%q, strict=%v) error = %v; want ErrKeyInvalid", v, strict, err)
				continue
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("ParseKey(%q, strict=%v) error %q echoes the value", v, strict, err)
			}
		}
	}
	if _, err := ParseKey([]string{`"` + secret + `"`, `"b"`}, false); err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("two field lines: error = %v; want a rejection that does not echo the value", err)
	}
}

// TestParseKeyFastPathDoesNotAllocate pins the allocation promise that the
// benchmark reports, so a regression fails the ordinary test run.
func TestParseKeyFastPathDoesNotAllocate(t *testing.T) {
	tests := []struct {
		name   string
		line   string
		strict bool
	}{
		{"quoted uuid strict", `"` + sfUUID + `"`, true},
		{"quoted uuid lenient", `"` + sfUUID + `"`, false},
		{"quoted uuid with parameters", `"` + sfUUID + `";v=1;w`, true},
		{"bare uuid lenient", sfUUID, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines := []string{tt.line}
			allocs := testing.AllocsPerRun(100, func() {
				if _, err := ParseKey(lines, tt.strict); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("ParseKey(%q, strict=%v) allocates %v times per call; want 0", tt.line, tt.strict, allocs)
			}
		})
	}
}

func TestSFParseItem(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		want   sfBareItem
		params []sfParam
	}{
		{"integer", "42", sfBareItem{kind: sfInteger, num: 42}, nil},
		{"negative zero", "-0", sfBareItem{kind: sfInteger}, nil},
		{"15-digit integer", "-999999999999999", sfBareItem{kind: sfInteger, num: -999999999999999}, nil},
		{"decimal", "-1.5", sfBareItem{kind: sfDecimal, num: -1500}, nil},
		{"max decimal", "999999999999.999", sfBareItem{kind: sfDecimal, num: 999999999999999}, nil},
		{"string", `"a\"b"`, sfBareItem{kind: sfString, str: `a"b`}, nil},
		{"token", "*foo:/bar!", sfBareItem{kind: sfToken, str: "*foo:/bar!"}, nil},
		{"byte sequence", ":aGk=:", sfBareItem{kind: sfByteSeq, bytes: []byte("hi")}, nil},
		{"byte sequence without padding", ":aGk:", sfBareItem{kind: sfByteSeq, bytes: []byte("hi")}, nil},
		{"true", "?1", sfBareItem{kind: sfBoolean, boolean: true}, nil},
		{"false", "?0", sfBareItem{kind: sfBoolean}, nil},
		{"date", "@-62135596800", sfBareItem{kind: sfDate, num: -62135596800}, nil},
		{"display string", `%"f%c3%bc"`, sfBareItem{kind: sfDisplayString, str: "fü"}, nil},
		{"parameters in order, last value wins", `1; b=2;a;b=3`, sfBareItem{kind: sfInteger, num: 1},
			[]sfParam{{"b", sfBareItem{kind: sfInteger, num: 3}}, {"a", sfBareItem{kind: sfBoolean, boolean: true}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sfParseItem(tt.in)
			if err != nil {
				t.Fatalf("sfParseItem(%q) error: %v", tt.in, err)
			}
			if !sfBareEqual(got.bare, tt.want) {
				t.Errorf("sfParseItem(%q) = %+v; want %+v", tt.in, got.bare, tt.want)
			}
			if len(got.params) != len(tt.params) {
				t.Fatalf("sfParseItem(%q) params = %+v; want %+v", tt.in, got.params, tt.params)
			}
			for i := range tt.params {
				if got.params[i].key != tt.params[i].key || !sfBareEqual(got.params[i].value, tt.params[i].value) {
					t.Errorf("sfParseItem(%q) param %d = %+v; want %+v", tt.in, i, got.params[i], tt.params[i])
				}
			}
		})
	}

	for _, in := range []string{
		"", " ", "1234567890123456", "1234567890123.0", "1.1234", "1.", "-", "--1", "1..2",
		":=aGk:", ":aGk==:", ":====:", ":a:", ":aGk", "?", "?2", "@", "@1.5", "@x",
		`%"`, `%"%"`, `%"%c"`, `%"%C3%BC"`, `%"%ff"`, `%x"`, "a;", "a;B", "a;b=", "a b", "1,2", "\t1",
	} {
		t.Run("reject "+strconv.Quote(in), func(t *testing.T) {
			if got, err := sfParseItem(in); err == nil {
				t.Errorf("sfParseItem(%q) = %+v; want an error", in, got)
			}
		})
	}
}

func sfBareEqual(a, b sfBareItem) bool {
	return a.kind == b.kind && a.num == b.num && a.boolean == b.boolean && a.str == b.str && bytes.Equal(a.bytes, b.bytes)
}

// sfVectorDir holds the RFC 9651 test vectors (see its README.md for their
// source, commit and licence).
var sfVectorDir = filepath.Join("testdata", "structured-field-tests")

// sfVector is one record of the httpwg structured-field-tests files.
type sfVector struct {
	Name       string          `json:"name"`
	Raw        []string        `json:"raw"`
	HeaderType string          `json:"header_type"`
	Expected   json.RawMessage `json:"expected"`
	MustFail   bool            `json:"must_fail"`
	CanFail    bool            `json:"can_fail"`
}

// TestSFVectors runs every Item record of the RFC 9651 test suite through
// the parser, and the String ones through ParseKey. The vectors are part of
// the repository, so their absence is a failure rather than a skip.
func TestSFVectors(t *testing.T) {
	if _, err := os.Stat(sfVectorDir); err != nil {
		t.Fatalf("RFC 9651 test vectors not found at %s: %v", sfVectorDir, err)
	}
	files, err := filepath.Glob(filepath.Join(sfVectorDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no *.json test vector files in %s", sfVectorDir)
	}
	var n sfVectorCounts
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var vectors []sfVector
		if err := json.Unmarshal(data, &vectors); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, v := range vectors {
			if v.HeaderType != "item" {
				continue
			}
			n.records++
			field := strings.Join(v.Raw, ", ")
			t.Run(filepath.Base(file)+"/"+v.Name, func(t *testing.T) {
				sfCheckVector(t, v, field, &n)
			})
		}
	}
	if n.records == 0 {
		t.Fatalf("no item records found in %s", sfVectorDir)
	}
	t.Logf("checked %d RFC 9651 item records from %d files: %d must_fail rejected, %d parsed and compared (%d can_fail among them), %d can_fail rejected; %d ParseKey calls",
		n.records, len(files), n.mustFail, n.parsed, n.canFailParsed, n.canFailRejected, n.keyCalls)
}

// sfVectorCounts tallies what TestSFVectors checked, for its log line.
type sfVectorCounts struct {
	records, mustFail, parsed, canFailParsed, canFailRejected, keyCalls int
}

// sfCheckVector checks one item record against sfParseItem and ParseKey.
func sfCheckVector(t *testing.T, v sfVector, field string, n *sfVectorCounts) {
	t.Helper()
	item, err := sfParseItem(field)
	if v.MustFail {
		n.mustFail++
		if err == nil {
			t.Errorf("sfParseItem(%q) = %+v; want an error", field, item)
		}
		// Whether as the raw field lines or combined into one, a value the
		// RFC rejects is never a key.
		for _, lines := range [][]string{v.Raw, {field}} {
			if k, err := ParseKey(lines, true); !errors.Is(err, ErrKeyInvalid) {
				t.Errorf("ParseKey(%q, strict) = %q, %v; want ErrKeyInvalid", lines, k, err)
			}
			n.keyCalls++
		}
		return
	}
	if err != nil {
		if !v.CanFail {
			t.Errorf("sfParseItem(%q) error: %v", field, err)
		}
		n.canFailRejected++
		return
	}
	n.parsed++
	if v.CanFail {
		n.canFailParsed++
	}
	var expected []any
	dec := json.NewDecoder(bytes.NewReader(v.Expected))
	dec.UseNumber()
	if err := dec.Decode(&expected); err != nil || len(expected) != 2 {
		t.Fatalf("malformed expected value %s: %v", v.Expected, err)
	}
	if err := sfCheckBare(item.bare, expected[0]); err != nil {
		t.Errorf("sfParseItem(%q): %v", field, err)
	}
	if err := sfCheckParams(item.params, expected[1]); err != nil {
		t.Errorf("sfParseItem(%q): %v", field, err)
	}

	want, isString := expected[0].(string)
	if !isString || len(v.Raw) != 1 {
		return
	}
	n.keyCalls++
	got, err := ParseKey(v.Raw, true)
	if want == "" || len(want) > 255 {
		if !errors.Is(err, ErrKeyInvalid) {
			t.Errorf("ParseKey(%q, strict) = %q, %v; want ErrKeyInvalid", v.Raw, got, err)
		}
	} else if err != nil || got != want {
		t.Errorf("ParseKey(%q, strict) = %q, %v; want %q", v.Raw, got, err, want)
	}
}

// sfCheckBare compares a parsed bare item with the test suite's JSON form:
// strings, numbers and booleans as themselves, other types as objects with
// a "__type" member.
func sfCheckBare(got sfBareItem, want any) error {
	switch w := want.(type) {
	case string:
		if got.kind != sfString || got.str != w {
			return fmt.Errorf("got %v %q; want string %q", got.kind, got.str, w)
		}
	case bool:
		if got.kind != sfBoolean || got.boolean != w {
			return fmt.Errorf("got %v %v; want boolean %v", got.kind, got.boolean, w)
		}
	case json.Number:
		if strings.ContainsAny(w.String(), ".eE") {
			n, err := sfThousandths(w.String())
			if err != nil {
				return err
			}
			if got.kind != sfDecimal || got.num != n {
				return fmt.Errorf("got %v %d/1000; want decimal %s", got.kind, got.num, w)
			}
			return nil
		}
		n, err := w.Int64()
		if err != nil {
			return err
		}
		if got.kind != sfInteger || got.num != n {
			return fmt.Errorf("got %v %d; want integer %d", got.kind, got.num, n)
		}
	case map[string]any:
		switch typ := w["__type"]; typ {
		case "token", "displaystring":
			kind := sfToken
			if typ == "displaystring" {
				kind = sfDisplayString
			}
			if got.kind != kind || got.str != w["value"] {
				return fmt.Errorf("got %v %q; want %v %q", got.kind, got.str, kind, w["value"])
			}
		case "binary":
			s, _ := w["value"].(string)
			b, err := base32.StdEncoding.DecodeString(s)
			if err != nil {
				return fmt.Errorf("expected binary value %q: %v", s, err)
			}
			if got.kind != sfByteSeq || !bytes.Equal(got.bytes, b) {
				return fmt.Errorf("got %v %x; want byte sequence %x", got.kind, got.bytes, b)
			}
		case "date":
			num, _ := w["value"].(json.Number)
			n, err := num.Int64()
			if err != nil {
				return fmt.Errorf("expected date value %v: %v", w["value"], err)
			}
			if got.kind != sfDate || got.num != n {
				return fmt.Errorf("got %v %d; want date %d", got.kind, got.num, n)
			}
		default:
			return fmt.Errorf("unknown expected type %v", typ)
		}
	default:
		return fmt.Errorf("unknown expected value %#v", want)
	}
	return nil
}

func sfCheckParams(got []sfParam, want any) error {
	pairs, ok := want.([]any)
	if !ok {
		return fmt.Errorf("expected parameters are %#v, not a list", want)
	}
	if len(got) != len(pairs) {
		return fmt.Errorf("got %d parameters; want %d", len(got), len(pairs))
	}
	for i, p := range pairs {
		pair, ok := p.([]any)
		if !ok || len(pair) != 2 {
			return fmt.Errorf("expected parameter %#v is not a pair", p)
		}
		if got[i].key != pair[0] {
			return fmt.Errorf("parameter %d key = %q; want %v", i, got[i].key, pair[0])
		}
		if err := sfCheckBare(got[i].value, pair[1]); err != nil {
			return fmt.Errorf("parameter %q: %v", got[i].key, err)
		}
	}
	return nil
}

// sfThousandths converts a plain decimal literal to thousandths exactly,
// avoiding float rounding in the comparison.
func sfThousandths(s string) (int64, error) {
	intPart, frac, _ := strings.Cut(s, ".")
	if len(frac) > 3 {
		return 0, fmt.Errorf("expected decimal %s has more than 3 fractional digits", s)
	}
	frac += strings.Repeat("0", 3-len(frac))
	neg := strings.HasPrefix(intPart, "-")
	n, err := strconv.ParseInt(strings.TrimPrefix(intPart, "-")+frac, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("expected decimal %s: %v", s, err)
	}
	if neg {
		n = -n
	}
	return n, nil
}

// sfQuote serialises s as an sf-string.
func sfQuote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// sfPrintable returns every printable ASCII character, 0x20 to 0x7E.
func sfPrintable() string {
	b := make([]byte, 0, 0x7f-0x20)
	for c := byte(0x20); c < 0x7f; c++ {
		b = append(b, c)
	}
	return string(b)
}

func BenchmarkParseKey(b *testing.B) {
	benchmarks := []struct {
		name   string
		line   string
		strict bool
	}{
		{"quoted uuid", `"` + sfUUID + `"`, true},
		{"bare uuid", sfUUID, false},
		{"quoted uuid with parameters", `"` + sfUUID + `";v=1`, true},
		{"quoted with escape", `"` + sfUUID + `\\"`, true},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			lines := []string{bm.line}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseKey(lines, bm.strict); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// sfParseItem parses field as a complete RFC 9651 Item (§4.2 with
// field_type "item"): surrounding SP, a bare item of any type, its
// parameters, and nothing else.
func sfParseItem(field string) (sfItem, error) {
	p := sfParser{s: field}
	return p.item(true)
}
