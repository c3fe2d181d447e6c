package gormstore

import (
	"slices"
	"testing"

	"github.com/idemkit/idemkit/core/exchange"
)

func TestHeaderRoundTrip(t *testing.T) {
	cases := []struct {
		name string
		h    []exchange.HeaderField
	}{
		{"none", nil},
		{"one", []exchange.HeaderField{{Name: "Content-Type", Values: []string{"application/json"}}}},
		{"several values", []exchange.HeaderField{
			{Name: "Content-Type", Values: []string{"text/plain"}},
			{Name: "Link", Values: []string{"</a>; rel=a", "</b>; rel=b", ""}},
			{Name: "Location", Values: []string{"/v1/charges/ch_1"}},
		}},
		{"no values", []exchange.HeaderField{{Name: "X-Empty", Values: []string{}}}},
		{"any bytes", []exchange.HeaderField{{Name: "X-\x00\r\n:", Values: []string{"\xff\x80\r\n\x00", string(make([]byte, 300))}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			enc := appendHeader(nil, c.h)
			got, err := decodeHeader(enc)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if len(got) != len(c.h) {
				t.Fatalf("decoded %d fields %q, want %q", len(got), got, c.h)
			}
			for i, f := range c.h {
				if got[i].Name != f.Name || !slices.Equal(got[i].Values, f.Values) {
					t.Fatalf("field %d = %q %q, want %q %q", i, got[i].Name, got[i].Values, f.Name, f.Values)
				}
			}
			// Appending to one field's values must not write into the next's.
			if len(got) > 1 {
				next := slices.Clone(got[1].Values)
				_ = append(got[0].Values, "appended")
				if !slices.Equal(got[1].Values, next) {
					t.Fatal("appending to a decoded field overwrote the next field")
				}
			}
		})
	}
}

func TestHeaderCorrupt(t *testing.T) {
	good := appendHeader(nil, []exchange.HeaderField{{Name: "Content-Type", Values: []string{"text/plain", "x"}}})
	cases := map[string][]byte{
		"version":        append([]byte{9}, good[1:]...),
		"truncated":      good[:len(good)-1],
		"trailing bytes": append(append([]byte(nil), good...), 0),
		"huge count":     {headerVersion, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"huge length":    {headerVersion, 1, 0xff, 0xff, 0x03, 'a'},
		"varint overrun": {headerVersion, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},
		"cut varint":     {headerVersion, 0x80},
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if h, err := decodeHeader(b); err == nil {
				t.Fatalf("decodeHeader(% x) = %q, want an error", b, h)
			}
		})
	}
}

func FuzzHeader(f *testing.F) {
	f.Add(appendHeader(nil, []exchange.HeaderField{{Name: "A", Values: []string{"b", "c"}}}))
	f.Add([]byte{headerVersion, 2, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err != nil || len(b) == 0 {
			return
		}
		// Whatever decodes re-encodes to the same bytes: the encoding is
		// unambiguous.
		if again := appendHeader(nil, h); string(again) != string(b) && len(h) > 0 {
			t.Fatalf("% x decodes to %q, which encodes to % x", b, h, again)
		}
	})
}
