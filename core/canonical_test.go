package idem

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestCanonicalJSON(t *testing.T) {
	deep := strings.Repeat("[", canonMaxDepth) + strings.Repeat("]", canonMaxDepth)
	tests := []struct {
		name, in, want string
	}{
		{"empty object", `{}`, `{}`},
		{"empty object with whitespace", " { \n\t} ", `{}`},
		{"empty array", `[ ]`, `[]`},
		{"top-level string", ` "x" `, `"x"`},
		{"top-level empty string", `""`, `""`},
		{"top-level number", "\n-12.5e+3\r\n", `-12.5e+3`},
		{"top-level zero", `0`, `0`},
		{"top-level true", `true`, `true`},
		{"top-level false", ` false`, `false`},
		{"top-level null", `null `, `null`},
		{"members reordered", `{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"already sorted", `{"a":1,"b":2,"c":3}`, `{"a":1,"b":2,"c":3}`},
		{"reverse order", `{"e":5,"d":4,"c":3,"b":2,"a":1}`, `{"a":1,"b":2,"c":3,"d":4,"e":5}`},
		{"prefix key first", `{"a!":1,"a":2}`, `{"a":2,"a!":1}`},
		{"folded key order", `{"é":1,"z":2,"_":4,"y":3}`, `{"y":3,"z":2,"_":4,"é":1}`},
		// Names a decoder matches as one keep their input order; the rest
		// are ordered around them.
		{"case variants keep their order", `{"z":0,"amount":1,"b":2,"Amount":3}`, `{"amount":1,"Amount":3,"b":2,"z":0}`},
		{"case variants reversed", `{"Amount":3,"amount":1}`, `{"Amount":3,"amount":1}`},
		{"kelvin sign folds to k", "{\"\u212a\":1,\"j\":0,\"k\":2}", "{\"j\":0,\"\u212a\":1,\"k\":2}"},
		{"long s folds to s", "{\"\u017f\":1,\"S\":2,\"r\":0}", "{\"r\":0,\"\u017f\":1,\"S\":2}"},
		{"non-ASCII case variants", `{"É":1,"a":0,"é":2}`, `{"a":0,"É":1,"é":2}`},
		{"invalid bytes and lone surrogates are one name", "{\"\xff\":1,\"\\ud800\":2,\"\xef\xbf\xbd\":3}", "{\"\xff\":1,\"\\ud800\":2,\"\xef\xbf\xbd\":3}"},
		{
			"nested objects and arrays",
			`{"z":{"y":1,"x":[3,{"d":4,"c":5}]},"a":null}`,
			`{"a":null,"z":{"x":[3,{"c":5,"d":4}],"y":1}}`,
		},
		{
			"nested reorder with values of different lengths",
			`{"m":{"long":"xxxxxxxxxx","a":[]},"b":{"q":true,"p":false},"a":0}`,
			`{"a":0,"b":{"p":false,"q":true},"m":{"a":[],"long":"xxxxxxxxxx"}}`,
		},
		{"array order kept", `[3,1,2,{"b":0,"a":0}]`, `[3,1,2,{"a":0,"b":0}]`},
		{
			"whitespace everywhere",
			"\t{ \"b\" :\r\n [ 1 , 2 ] ,\n\"a\": true }\n",
			`{"a":true,"b":[1,2]}`,
		},
		{"unicode escape decoded", `"\u0061"`, `"a"`},
		{"escaped key sorts as decoded", `{"b":1,"\u0061":2}`, `{"a":2,"b":1}`},
		{"escaped solidus", `"\/"`, `"/"`},
		{"uppercase hex escape", `"\u00E9\u4E2d"`, `"é中"`},
		{"surrogate pair", `"\ud83d\uDE00"`, `"😀"`},
		{"lone high surrogate", `"\uD800x"`, `"\ud800x"`},
		{"lone low surrogate", `"\uDC00"`, `"\udc00"`},
		{"lone high at end", `"a\ud800"`, `"a\ud800"`},
		{"high before pair", `"\ud800\ud83d\ude00"`, `"\ud800😀"`},
		{"high before non-escape", `"\ud800\n"`, `"\ud800\n"`},
		{"low before high", `"\udc00\ud800"`, `"\udc00\ud800"`},
		{"short escapes kept", `"\b\f\n\r\t"`, `"\b\f\n\r\t"`},
		{"short escapes from hex", `"\u0008\u000C\u000a\u000D\u0009"`, `"\b\f\n\r\t"`},
		{"other controls lowercase hex", `"\u0000\u0001\u001F"`, `"\u0000\u0001\u001f"`},
		{"quote and backslash from hex", `"\u0022\u005C"`, `"\"\\"`},
		{"quote and backslash kept", `"\"\\"`, `"\"\\"`},
		{"DEL literal", `"\u007f"`, "\"\x7f\""},
		{"raw non-ASCII kept", `"héllo wörld"`, `"héllo wörld"`},
		{"raw invalid UTF-8 kept", "\"\xff\xfe\xed\xa0\x80\"", "\"\xff\xfe\xed\xa0\x80\""},
		{"duplicate keys stable", `{"b":0,"a":1,"a":2}`, `{"a":1,"a":2,"b":0}`},
		{"duplicate keys stable reversed", `{"a":2,"b":0,"a":1}`, `{"a":2,"a":1,"b":0}`},
		{"duplicate keys by escape", `{"z":0,"a":1,"\u0061":2}`, `{"a":1,"a":2,"z":0}`},
		// Decoded '"' (0x22) sorts before '#' though its encoding `\"` starts
		// with 0x5c; likewise U+0001 before '\n' though `\u0001` > `\n`.
		{"sort by decoded quote", `{"#":1,"\"":2}`, `{"\"":2,"#":1}`},
		{"sort by decoded control", `{"\n":1,"\u0001":2}`, `{"\u0001":2,"\n":1}`},
		{"sort by decoded backslash", `{"]":1,"\\":2,"[":3}`, `{"[":3,"\\":2,"]":1}`},
		{"numbers literal", `[1.0,1,1e2,100,1E2,-0,0.5e-3,10E+00]`, `[1.0,1,1e2,100,1E2,-0,0.5e-3,10E+00]`},
		{"long plain string", `"abcdefghijklmnopqrstuvwxyz0123456789"`, `"abcdefghijklmnopqrstuvwxyz0123456789"`},
		{"escape after a word", `"abcdefgh\u0069jklmnop\/"`, `"abcdefghijklmnop/"`},
		{"quote escape late in word", `"abcdefghijklm\"n"`, `"abcdefghijklm\"n"`},
		{"long non-ASCII", `"ééééééééé€€€€€😀😀😀"`, `"ééééééééé€€€€€😀😀😀"`},
		{"max depth", deep, deep},
		{
			"max depth objects",
			strings.Repeat(`{"a":`, canonMaxDepth) + "1" + strings.Repeat("}", canonMaxDepth),
			strings.Repeat(`{"a":`, canonMaxDepth) + "1" + strings.Repeat("}", canonMaxDepth),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := canonicalJSON(nil, []byte(tt.in))
			if !ok {
				t.Fatalf("canonicalJSON(%q) not ok", tt.in)
			}
			if string(got) != tt.want {
				t.Errorf("canonicalJSON(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
			// Appending after existing content must leave it intact.
			got, ok = canonicalJSON([]byte("prefix:"), []byte(tt.in))
			if !ok || string(got) != "prefix:"+tt.want {
				t.Errorf("with prefix: got %q, %v; want %q", got, ok, "prefix:"+tt.want)
			}
		})
	}
}

func TestCanonicalJSONInvalid(t *testing.T) {
	tests := []struct {
		name, in string
	}{
		{"empty", ``},
		{"whitespace only", " \t\r\n"},
		{"unterminated object", `{`},
		{"unterminated object after member", `{"a":1`},
		{"unterminated array", `[1,2`},
		{"stray close", `}`},
		{"extra close", `[1]]`},
		{"mismatched close", `[1}`},
		{"trailing comma in array", `[1,]`},
		{"trailing comma in object", `{"a":1,}`},
		{"leading comma", `[,1]`},
		{"missing colon", `{"a" 1}`},
		{"missing value", `{"a":}`},
		{"unquoted key", `{a:1}`},
		{"non-string key", `{1:1}`},
		{"missing comma in object", `{"a":1 "b":2}`},
		{"missing comma in array", `[1 2]`},
		{"two values", `1 2`},
		{"two objects", `{} {}`},
		{"trailing junk", `{}x`},
		{"leading zero", `01`},
		{"negative leading zero", `-01`},
		{"plus sign", `+1`},
		{"bare fraction", `.5`},
		{"trailing dot", `1.`},
		{"dot before exponent", `1.e5`},
		{"empty exponent", `1e`},
		{"signed empty exponent", `1e+`},
		{"lone minus", `-`},
		{"double minus", `--1`},
		{"hex number", `0x10`},
		{"NaN", `NaN`},
		{"Infinity", `-Infinity`},
		{"truncated true", `tru`},
		{"true with junk", `truex`},
		{"truncated null", `nul`},
		{"capitalised literal", `True`},
		{"unterminated string", `"abc`},
		{"unterminated after escape", `"abc\`},
		{"bad escape", `"\x"`},
		{"short unicode escape", `"\u12"`},
		{"bad hex digit", `"\u12g4"`},
		{"bad escape after high surrogate", `"\ud800\u"`},
		{"bad hex after high surrogate", `"\ud800\udcxx"`},
		{"raw tab in string", "\"a\tb\""},
		{"raw newline in string", "\"a\nb\""},
		{"raw NUL in string", "\"\x00\""},
		{"raw control after a word", "\"abcdefghijk\x1fl\""},
		{"raw control at word end", "\"abcdefg\x01\""},
		{"unterminated long string", `"abcdefghijklmnopqrstuvwxyz`},
		{"single quotes", `'a'`},
		{"byte order mark", "\xef\xbb\xbf{}"},
		{"NUL after value", "1\x00"},
		{"too deep arrays", strings.Repeat("[", canonMaxDepth+1) + strings.Repeat("]", canonMaxDepth+1)},
		{"too deep objects", strings.Repeat(`{"a":`, canonMaxDepth+1) + "1" + strings.Repeat("}", canonMaxDepth+1)},
		{"far too deep", strings.Repeat("[", 1<<20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := []byte("prefix:")
			got, ok := canonicalJSON(dst, []byte(tt.in))
			if ok {
				t.Fatalf("canonicalJSON(%q) = %q, ok; want not ok", tt.in, got)
			}
			if string(got) != "prefix:" {
				t.Errorf("on failure got %q, want dst unchanged %q", got, "prefix:")
			}
		})
	}
}

// TestCanonicalJSONEquivalence checks the property fingerprints rely on:
// documents that differ only in member order and formatting collapse to
// one form, and documents that differ in any value do not.
func TestCanonicalJSONEquivalence(t *testing.T) {
	same := []struct {
		name, a, b string
	}{
		{"member order", `{"a":1,"b":2}`, `{"b":2,"a":1}`},
		{
			"order and whitespace",
			`{"amount":1999,"currency":"usd","metadata":{"b":1,"a":[1,{"y":2,"x":1}]}}`,
			"{ \"metadata\" : { \"a\" : [ 1 , {\"x\":1, \"y\":2} ] ,\n\"b\":1 },\n\t\"currency\":\"usd\", \"amount\" : 1999 }",
		},
		{"escape spelling", `{"k":"\u00e9\/\u0041"}`, `{"k":"é/A"}`},
		{"escaped key", `{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
		{"lone surrogate case", `"\uDBFF"`, `"\udbff"`},
		{"duplicates moved together", `{"a":1,"z":0,"a":2}`, `{"z":0,"a":1,"a":2}`},
		{"case variants moved together", `{"Amount":1,"z":0,"amount":2}`, `{"z":0,"Amount":1,"amount":2}`},
	}
	for _, tt := range same {
		t.Run("same/"+tt.name, func(t *testing.T) {
			a, okA := canonicalJSON(nil, []byte(tt.a))
			b, okB := canonicalJSON(nil, []byte(tt.b))
			if !okA || !okB {
				t.Fatalf("not ok: %v, %v", okA, okB)
			}
			if !bytes.Equal(a, b) {
				t.Errorf("differ:\n%q\n%q", a, b)
			}
		})
	}

	different := []struct {
		name, a, b string
	}{
		{"value", `{"a":1}`, `{"a":2}`},
		{"key", `{"a":1}`, `{"b":1}`},
		{"number spelling", `{"a":1}`, `{"a":1.0}`},
		{"exponent", `100`, `1e2`},
		{"exponent case", `1e2`, `1E2`},
		{"negative zero", `0`, `-0`},
		{"array order", `[1,2]`, `[2,1]`},
		{"string and number", `"1"`, `1`},
		{"null and missing", `{"a":null}`, `{}`},
		{"duplicate order", `{"a":1,"a":2}`, `{"a":2,"a":1}`},
		// encoding/json decodes both into a struct field "amount": the first
		// as 99999, the second as 100 (the last match wins).
		{"case variant order", `{"amount":100,"Amount":99999}`, `{"Amount":99999,"amount":100}`},
		{"kelvin sign order", "{\"k\":1,\"\u212a\":2}", "{\"\u212a\":2,\"k\":1}"},
		{"lone surrogate and invalid byte order", "{\"\\ud800\":1,\"\xff\":2}", "{\"\xff\":2,\"\\ud800\":1}"},
		{"lone surrogate and replacement", `"\ud800"`, `"\ufffd"`},
		{"lone surrogate and raw bytes", `"\ud800"`, "\"\xed\xa0\x80\""},
		{"invalid byte and replacement", "\"\xff\"", `"\ufffd"`},
		{"nesting", `[[1]]`, `[1]`},
	}
	for _, tt := range different {
		t.Run("different/"+tt.name, func(t *testing.T) {
			a, okA := canonicalJSON(nil, []byte(tt.a))
			b, okB := canonicalJSON(nil, []byte(tt.b))
			if !okA || !okB {
				t.Fatalf("not ok: %v, %v", okA, okB)
			}
			if bytes.Equal(a, b) {
				t.Errorf("both canonicalise to %q", a)
			}
		})
	}
}

// TestCanonicalKeyOrderTotal guards against the key order depending on the
// input order: for keys whose decoded bytes coincide but whose encodings
// differ (a lone surrogate and the raw WTF-8 bytes of the same code point),
// both input orders must give the same output.
func TestCanonicalKeyOrderTotal(t *testing.T) {
	a, okA := canonicalJSON(nil, []byte("{\"\\ud800\":1,\"\xed\xa0\x80\":2}"))
	b, okB := canonicalJSON(nil, []byte("{\"\xed\xa0\x80\":2,\"\\ud800\":1}"))
	if !okA || !okB {
		t.Fatalf("not ok: %v, %v", okA, okB)
	}
	if !bytes.Equal(a, b) {
		t.Errorf("output depends on input order:\n%q\n%q", a, b)
	}
}

// TestCanonicalWordSpecial compares the word-at-a-time test with the byte
// table for every byte value at every position, against two backgrounds
// (plain ASCII and high bytes, which stress the borrow logic).
func TestCanonicalWordSpecial(t *testing.T) {
	for _, fill := range []byte{'a', 0xff, 0x80, 0x20, '"' + 1} {
		t.Run(fmt.Sprintf("fill %#x", fill), func(t *testing.T) {
			for pos := range 8 {
				for c := range 256 {
					var word [8]byte
					for i := range word {
						word[i] = fill
					}
					word[pos] = byte(c)
					w := binary.LittleEndian.Uint64(word[:])
					if got, want := canonWordSpecial(w), !canonSafe[c]; got != want {
						t.Errorf("byte %#x at %d: got %v, want %v", c, pos, got, want)
					}
				}
			}
		})
	}
}

const canonBenchDoc = `{"amount":1999,"currency":"usd","customer":"cus_8f3a","description":"Order #1234","metadata":{"b":1,"a":2}}`

func BenchmarkCanonicalJSON(b *testing.B) {
	src := []byte(canonBenchDoc)
	var dst []byte
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		var ok bool
		dst, ok = canonicalJSON(dst[:0], src)
		if !ok {
			b.Fatal("not ok")
		}
	}
}

// TestCanonicalCompareNamesFast holds the byte-at-a-time comparison of
// ASCII names to the rune-by-rune one (canonCompareNamesSlow on the whole
// names) on names that mix ASCII letters of both cases, digits, escapes,
// the Kelvin sign and long s (which fold with k and s), other non-ASCII
// runes and invalid bytes, at every position. The two must agree on every
// pair, or the fingerprint of a body would change.
func TestCanonicalCompareNamesFast(t *testing.T) {
	parts := []string{"", "a", "A", "b", "k", "K", "s", "S", "z", "Z", "0", "_", "@", "[", "`", "{",
		"\u212a", "\u017f", "é", "É", "\\n", "\\\"", "\\\\", "\\u0001", "\\ud800", "\xff", "\xed\xa0\x80", "~"}
	var names []string
	for _, p := range parts {
		for _, q := range parts {
			names = append(names, p+q, "ab"+p+q, p+"x"+q)
		}
	}
	for _, a := range names {
		for _, b := range names {
			got := canonCompareNames([]byte(a), []byte(b))
			want := canonCompareNamesSlow([]byte(a), []byte(b))
			if got != want {
				t.Fatalf("canonCompareNames(%q, %q) = %d, rune by rune %d", a, b, got, want)
			}
		}
	}
}

// FuzzCanonicalCompareNames is TestCanonicalCompareNamesFast on any two
// JSON strings, as canonicalJSON writes them: the fast comparison agrees
// with the rune-by-rune one.
func FuzzCanonicalCompareNames(f *testing.F) {
	f.Add([]byte(`"amount"`), []byte(`"Amount"`))
	f.Add([]byte("\"k\u212a\""), []byte(`"kk"`))
	f.Add([]byte(`"a\nb"`), []byte(`"a\u0001\ud800"`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		ca, okA := canonicalJSON(nil, a)
		cb, okB := canonicalJSON(nil, b)
		if !okA || !okB || ca[0] != '"' || cb[0] != '"' {
			return
		}
		na, nb := ca[1:len(ca)-1], cb[1:len(cb)-1]
		if got, want := canonCompareNames(na, nb), canonCompareNamesSlow(na, nb); got != want {
			t.Fatalf("canonCompareNames(%q, %q) = %d, rune by rune %d", na, nb, got, want)
		}
	})
}

// TestCanonicalReorderStable holds canonicalJSON's member order, for
// objects of every size around the switch from insertion sort to the
// library's stable sort, to a stable sort by canonCompareNames: names a
// decoder takes for one ("amount", "Amount", "AMOUNT") keep their order,
// which the values, numbered in input order, show.
func TestCanonicalReorderStable(t *testing.T) {
	names := []string{"amount", "Amount", "AMOUNT", "currency", "k", "\u212a", "K", "a", "b", "note", "s", "\u017f"}
	rng := rand.New(rand.NewPCG(40, 2))
	for n := 1; n <= 2*canonInsertionSort+3; n++ {
		for range 50 {
			type member struct {
				name string
				n    int
			}
			ms := make([]member, n)
			var doc strings.Builder
			doc.WriteByte('{')
			for i := range ms {
				ms[i] = member{names[rng.IntN(len(names))], i}
				if i > 0 {
					doc.WriteByte(',')
				}
				fmt.Fprintf(&doc, "%q:%d", ms[i].name, i)
			}
			doc.WriteByte('}')
			slices.SortStableFunc(ms, func(a, b member) int {
				return canonCompareNamesSlow([]byte(a.name), []byte(b.name))
			})
			var want strings.Builder
			want.WriteByte('{')
			for i, m := range ms {
				if i > 0 {
					want.WriteByte(',')
				}
				fmt.Fprintf(&want, `"%s":%d`, m.name, m.n)
			}
			want.WriteByte('}')
			got, ok := canonicalJSON(nil, []byte(doc.String()))
			if !ok || string(got) != want.String() {
				t.Fatalf("%s: got %s (ok %v), want %s", doc.String(), got, ok, want.String())
			}
		}
	}
}
