package storecodec_test

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/internal/storecodec"
)

var samples = [][]exchange.HeaderField{
	nil,
	{{Name: "Content-Type", Values: []string{"application/json"}}},
	{{Name: "Link", Values: []string{"</a>; rel=a", "</b>; rel=b"}}, {Name: "Location", Values: []string{"/v1/charges/ch_1"}}},
	{{Name: "X-Empty", Values: []string{""}}, {Name: "X-None", Values: nil}},
	{{Name: "X-Bytes", Values: []string{"\x00\xff\r\n\"", strings.Repeat("v", 300)}}},
}

func TestRoundTrip(t *testing.T) {
	for _, h := range samples {
		enc := storecodec.AppendHeader([]byte("prefix"), h)
		if got := len(enc) - len("prefix"); got != storecodec.HeaderSize(h) {
			t.Errorf("HeaderSize = %d, encoding is %d bytes", storecodec.HeaderSize(h), got)
		}
		got, rest, err := storecodec.ReadHeader(append(enc[len("prefix"):], "body"...))
		if err != nil || string(rest) != "body" {
			t.Fatalf("ReadHeader: %v, rest %q", err, rest)
		}
		if len(h) == 0 && got != nil {
			t.Fatalf("no fields decode to %v, want nil", got)
		}
		for i := range h {
			if got[i].Name != h[i].Name || strings.Join(got[i].Values, "\x00") != strings.Join(h[i].Values, "\x00") || len(got[i].Values) != len(h[i].Values) {
				t.Fatalf("field %d: %+v, want %+v", i, got[i], h[i])
			}
		}
	}
}

// The fields ReadHeader returns share one array of values; appending to
// one field's values, as a caller adding a header to a replay may, must
// not write into the next field's.
func TestDecodedFieldsAreClipped(t *testing.T) {
	for _, h := range samples {
		if len(h) < 2 {
			continue
		}
		got, _, err := storecodec.ReadHeader(storecodec.AppendHeader(nil, h))
		if err != nil {
			t.Fatal(err)
		}
		for i := range len(got) - 1 {
			next := slices.Clone(got[i+1].Values)
			_ = append(got[i].Values, "appended")
			if !slices.Equal(got[i+1].Values, next) {
				t.Fatalf("appending to field %d (%s) changed field %d (%s): %q, was %q",
					i, got[i].Name, i+1, got[i+1].Name, got[i+1].Values, next)
			}
		}
	}
}

func TestRefusesOtherSpellings(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":                    {},
		"count past the end":       {5, 1, 'a', 0},
		"length past the end":      {1, 9, 'a'},
		"non-minimal count":        {0x81, 0x00, 1, 'a', 0},
		"non-minimal length":       {1, 0x81, 0x00, 'a', 0},
		"value count past the end": {1, 1, 'a', 3, 1, 'b'},
		"unterminated varint":      {1, 0x80},
	} {
		if _, _, err := storecodec.ReadHeader(b); !errors.Is(err, storecodec.ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

func FuzzReadHeader(f *testing.F) {
	for _, h := range samples {
		f.Add(storecodec.AppendHeader(nil, h))
	}
	f.Add([]byte{0x81, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, rest, err := storecodec.ReadHeader(b)
		if err != nil {
			return
		}
		// One list of fields has one encoding: what was read re-encodes to
		// exactly the bytes consumed.
		consumed := b[:len(b)-len(rest)]
		if again := storecodec.AppendHeader(nil, h); !bytes.Equal(again, consumed) {
			t.Fatalf("read %q as %+v, which encodes to %q", consumed, h, again)
		}
		h2, _, err := storecodec.ReadHeader(consumed)
		if err != nil || !reflect.DeepEqual(h, h2) {
			t.Fatalf("not stable: %+v then %+v (%v)", h, h2, err)
		}
	})
}
