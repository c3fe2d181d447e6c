package redisstore

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// FuzzResponseCodec: any stored bytes decode to a response or an error,
// never a panic; and any response survives the round trip exactly.
func FuzzResponseCodec(f *testing.F) {
	f.Add(201, "Content-Type", "application/json", "Link", []byte(`{"id":1}`))
	f.Add(204, "", "", "", []byte{})
	f.Add(999, "X\x00", "\xff", "", bytes.Repeat([]byte{0x80}, 300))
	f.Fuzz(func(t *testing.T, status int, name, value, name2 string, body []byte) {
		_, _ = decodeResponse(string(body)) // arbitrary stored bytes
		if status < 0 || status > 999 {
			status %= 1000
			if status < 0 {
				status = -status
			}
		}
		want := exchange.Response{Status: status, Body: body}
		if name != "" {
			want.Header = append(want.Header, exchange.HeaderField{Name: name, Values: []string{value, value + value}})
		}
		if name2 != "" {
			want.Header = append(want.Header, exchange.HeaderField{Name: name2, Values: []string{}})
		}
		enc := encodeResponse(want)
		got, err := decodeResponse(string(enc))
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != want.Status || !bytes.Equal(got.Body, want.Body) || len(got.Header) != len(want.Header) {
			t.Fatalf("round trip: %+v, want %+v", got, want)
		}
		for i := range want.Header {
			if got.Header[i].Name != want.Header[i].Name || !slices.Equal(got.Header[i].Values, want.Header[i].Values) {
				t.Fatalf("header %d: %+v, want %+v", i, got.Header[i], want.Header[i])
			}
		}
		for cut := range enc {
			_, _ = decodeResponse(string(enc[:cut])) // truncated: an error or a shorter body, never a panic
		}
	})
}

// TestCorruptRecord: a record the store cannot read (written by hand, or
// by another program under the same prefix) is a system error, not a
// missing record, a panic or a response made up.
func TestCorruptRecord(t *testing.T) {
	c := dialSingle(t)
	s := newStore(t, c)
	ctx := testContext(t)
	cases := map[string][]any{
		"unknown state":     {"s", "9", "f", string(fp[:])},
		"short fingerprint": {"s", "1", "f", "abc", "ls", "1", "ln", "0", "es", "1", "en", "0"},
		"bad time":          {"s", "1", "f", string(fp[:]), "ls", "soon", "ln", "0", "es", "1", "en", "0"},
		"bad response":      {"s", "2", "f", string(fp[:]), "ls", "1", "ln", "0", "es", "1", "en", "0", "r", "\x02junk"},
	}
	for name, fields := range cases {
		id := idem.ID{Key: name}
		if err := c.HSet(ctx, s.Key(id), fields...).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, id); err == nil || errors.Is(err, idem.ErrNotFound) {
			t.Errorf("%s: Get = %v, want a system error", name, err)
		}
	}
	// Acquire reads a live record the same way: at the Unix epoch, the
	// record expiring a second later is live.
	id := idem.ID{Key: "bad response"}
	if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", time.Unix(0, 0))); err == nil {
		t.Error("Acquire over a corrupt live record succeeded")
	}
}
