package idem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"unicode"
)

func FuzzCanonicalJSON(f *testing.F) {
	seeds := []string{
		// Valid documents.
		`{"amount":1999,"currency":"usd","customer":"cus_8f3a","description":"Order #1234","metadata":{"b":1,"a":2}}`,
		`{"b":[1,{"d":null,"c":true}],"a":{"y":"\u0079","x":false}}`,
		" [ 1 , -0.5e+10 , 0 , 1E-2 , 123456789012345678901234567890 ] ",
		`"\u0061\/\b\f\n\r\t\"\\\u001f\u00e9\ud83d\ude00"`,
		`{"\ud800":1,"\udc00x":[],"\uDBFF\uDFFF":{}}`,
		`{"a":1,"a":2,"\u0061":3,"b":0}`,
		`{"000000":0,"\udC00":[],"\uD800":{}}`,
		`{"#":1,"\"":2,"\n":3,"\u0001":4,"\\":5}`,
		`{"amount":100,"Amount":99999,"n":{"S":1,"s":2},"k":0}`,
		"{\"\u212a\":1,\"k\":2,\"\u017f\":3,\"s\":4,\"a\":5,\"A\":6}",
		"{\"\xff\":1,\"\\udc00\":2,\"\xef\xbf\xbd\":3}",
		"{\"\xff\":\"\xed\xa0\x80\",\"\xc3\xa9\":\"caf\xc3\xa9\"}",
		`[[[[[[[[[[{"deep":[[[]]]}]]]]]]]]]]`,
		`true`,
		`null`,
		`""`,
		`{}`,
		// Invalid documents.
		``,
		`{"a":1,}`,
		`[01]`,
		`{"a" 1}`,
		`"\ud800\u12"`,
		"\"\t\"",
		`[1.]`,
		`{} []`,
		strings.Repeat("[", canonMaxDepth+1) + strings.Repeat("]", canonMaxDepth+1),
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		out, ok := canonicalJSON(nil, src)
		valid := json.Valid(src)
		if valid && canonNestingDepth(src) > canonMaxDepth {
			if ok {
				t.Fatalf("nesting deeper than %d accepted: %q", canonMaxDepth, src)
			}
			return
		}
		if ok != valid {
			t.Fatalf("canonicalJSON ok = %v, json.Valid = %v for %q", ok, valid, src)
		}

		// A failed call must hand dst back untouched; a successful one must
		// only append.
		prefixed, okPrefixed := canonicalJSON([]byte("prefix"), src)
		if okPrefixed != ok {
			t.Fatalf("ok with prefix = %v, without = %v", okPrefixed, ok)
		}
		if want := "prefix" + string(out); string(prefixed) != want {
			t.Fatalf("with prefix got %q, want %q", prefixed, want)
		}
		if !ok {
			return
		}

		if !json.Valid(out) {
			t.Fatalf("output is not valid JSON: %q -> %q", src, out)
		}
		again, ok := canonicalJSON(nil, out)
		if !ok || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent: %q -> %q -> %q (ok %v)", src, out, again, ok)
		}

		// The rule the fingerprint rests on: the canonical form decodes, with
		// encoding/json, to the value the source decodes to, into a map and
		// into a struct whose fields match names case-insensitively. So two
		// bodies with one canonical form are read alike by a server.
		for _, decode := range []func([]byte) (any, error){canonDecode, canonDecodeStruct} {
			want, errWant := decode(src)
			got, errGot := decode(out)
			if (errWant == nil) != (errGot == nil) {
				t.Fatalf("decoding differs:\nsrc %q: %v\nout %q: %v", src, errWant, out, errGot)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decoded values differ:\nsrc %q -> %#v\nout %q -> %#v", src, want, out, got)
			}
		}
		if err := canonCheckKeyOrder(out); err != nil {
			t.Fatalf("%v in %q (from %q)", err, out, src)
		}
	})
}

// canonStruct is a decoding target whose fields encoding/json matches by
// case-insensitive names, "k" and "s" among them since they fold with
// non-ASCII runes (the Kelvin sign, the long s).
type canonStruct struct {
	Amount any          `json:"amount"`
	K      any          `json:"k"`
	S      any          `json:"s"`
	A      any          `json:"a"`
	Nested *canonStruct `json:"n"`
	List   []any        `json:"list"`
}

func canonDecodeStruct(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v canonStruct
	err := d.Decode(&v)
	return v, err
}

// canonCheckKeyOrder checks, with an independent decoder, that the members
// of every object in a JSON text appear in order of their case-folded
// decoded names.
func canonCheckKeyOrder(b []byte) error {
	type frame struct {
		object, wantKey, seen bool
		last                  string
	}
	var stack []frame
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].wantKey = true
		}
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if n := len(stack); n > 0 && stack[n-1].wantKey {
			if tok == json.Delim('}') {
				stack = stack[:n-1]
				valueDone()
				continue
			}
			f := &stack[n-1]
			key := canonTestFold(tok.(string))
			if f.seen && key < f.last {
				return fmt.Errorf("key %q after %q", key, f.last)
			}
			f.last, f.seen, f.wantKey = key, true, false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{object: true, wantKey: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
			valueDone()
		default:
			valueDone()
		}
	}
}

// canonTestFold maps every rune of s to the smallest rune that
// unicode.SimpleFold reaches from it, as encoding/json folds names.
func canonTestFold(s string) string {
	return strings.Map(func(r rune) rune {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		return least
	}, s)
}

func canonDecode(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// canonNestingDepth returns the deepest container nesting of a valid JSON
// text. Validity means brackets outside strings are structural, and a
// backslash inside a string always starts a two-byte-or-longer escape.
func canonNestingDepth(src []byte) int {
	depth, deepest := 0, 0
	inString := false
	for i := 0; i < len(src); i++ {
		c := src[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ']', '}':
			depth--
		}
	}
	return deepest
}
