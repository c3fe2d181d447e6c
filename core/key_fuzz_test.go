package idem

import (
	"errors"
	"testing"
	"unicode/utf8"
)

func FuzzParseKey(f *testing.F) {
	for _, seed := range []struct {
		line   string
		strict bool
	}{
		{`"` + sfUUID + `"`, true},
		{sfUUID, false},
		{`  "a \"quoted\" \\ key";v=1; w`, true},
		{`"a, b"`, false},
		{`"a", "b"`, true},
		{`"abc`, true},
		{`"a\b"`, false},
		{`abc;x`, false},
		{`:aGk=:`, false},
		{"?1", true},
		{"\t\"abc\"\t", false},
		{"\"caf\xc3\xa9\"", true},
		{`"";a`, true},
	} {
		f.Add(seed.line, seed.strict)
	}
	f.Fuzz(func(t *testing.T, line string, strict bool) {
		key, err := ParseKey([]string{line}, strict)
		if err != nil {
			if !errors.Is(err, ErrKeyInvalid) {
				t.Fatalf("ParseKey(%q, %v) error %v does not wrap ErrKeyInvalid", line, strict, err)
			}
			if key != "" {
				t.Fatalf("ParseKey(%q, %v) returned key %q with error %v", line, strict, key, err)
			}
			return
		}
		if len(key) == 0 || len(key) > 255 {
			t.Fatalf("ParseKey(%q, %v) = %q: length %d outside 1..255", line, strict, key, len(key))
		}
		for i := 0; i < len(key); i++ {
			if c := key[i]; c < 0x20 || c > 0x7e {
				t.Fatalf("ParseKey(%q, %v) = %q: byte %#x is not printable ASCII", line, strict, key, c)
			}
		}
		quoted := sfQuote(key)
		again, err := ParseKey([]string{quoted}, true)
		if err != nil || again != key {
			t.Fatalf("round trip of %q via %q = %q, %v", key, quoted, again, err)
		}
		// Lenient mode only adds forms; it never reads a strict key differently.
		if strict {
			if lenient, err := ParseKey([]string{line}, false); err != nil || lenient != key {
				t.Fatalf("ParseKey(%q) = %q in strict mode but %q, %v in lenient mode", line, key, lenient, err)
			}
		}
	})
}

func FuzzSFParseItem(f *testing.F) {
	for _, seed := range []string{
		`"abc"`, `"a\"b";x=1;y`, "42", "-1.5", "1234567890123456", "tok:/en*",
		":aGVsbG8=:", ":iZ==:", "?0", "@1659578233", `%"f%c3%bc"`, `%"%C3"`,
		`1; a=?1; b="x"; c=:aGk=:; d=@1; e=%"e"; f=1.25; g=tok`, `"a", "b"`, " \t 1",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, field string) {
		item, err := sfParseItem(field)
		if err != nil {
			return
		}
		sfCheckFuzzedBare(t, field, item.bare)
		for _, p := range item.params {
			sfCheckFuzzedBare(t, field, p.value)
		}
	})
}

func sfCheckFuzzedBare(t *testing.T, field string, b sfBareItem) {
	t.Helper()
	switch b.kind {
	case sfString:
		for i := 0; i < len(b.str); i++ {
			if c := b.str[i]; c < 0x20 || c > 0x7e {
				t.Fatalf("sfParseItem(%q) string %q has byte %#x outside printable ASCII", field, b.str, c)
			}
		}
		if again, err := sfParseItem(sfQuote(b.str)); err != nil || again.bare.kind != sfString || again.bare.str != b.str {
			t.Fatalf("sfParseItem(%q) string %q does not survive re-serialisation: %+v, %v", field, b.str, again.bare, err)
		}
	case sfDisplayString:
		if !utf8.ValidString(b.str) {
			t.Fatalf("sfParseItem(%q) display string %q is not valid UTF-8", field, b.str)
		}
	case sfInvalid:
		t.Fatalf("sfParseItem(%q) succeeded with an invalid item", field)
	}
}
