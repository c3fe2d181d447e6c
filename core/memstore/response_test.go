package memstore

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// TestSharedHeadersRoundTrip completes records with headers of common
// strings only (which a shard unpacks once and shares), of uncommon
// strings, and of both, more kinds than a shard shares, and reads each back
// twice, by Get and by Acquire: every header comes back as it was stored,
// whether it was shared, is shared now or never will be.
func TestSharedHeadersRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := New(WithPurgeInterval(0))
	defer s.Close()
	now := time.Now()
	var headers [][]exchange.HeaderField
	for _, name := range commonStrings[:9] {
		for _, value := range commonStrings[9:] {
			headers = append(headers,
				[]exchange.HeaderField{{Name: name, Values: []string{value}}},
				[]exchange.HeaderField{{Name: name, Values: []string{value, "application/json"}}},
				[]exchange.HeaderField{{Name: "Content-Type", Values: []string{value}}, {Name: name, Values: []string{value}}},
				[]exchange.HeaderField{{Name: name, Values: []string{value, value, value}}, {Name: "Link", Values: nil}},
				[]exchange.HeaderField{{Name: name, Values: []string{value}}, {Name: "X-Custom", Values: []string{value}}},
				[]exchange.HeaderField{{Name: name, Values: []string{"/orders/" + value}}},
				[]exchange.HeaderField{{Name: name, Values: []string{""}}},
			)
		}
	}
	headers = append(headers, nil, []exchange.HeaderField{})
	ids := make([]idem.ID, len(headers))
	for i, h := range headers {
		ids[i] = idem.ID{Key: fmt.Sprint("key-", i%4), Scope: fmt.Sprint("scope-", i)} // a few shards see many kinds
		token := fmt.Sprint("token-", i)
		a := idem.Acquire{ID: ids[i], Token: token, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
		if _, _, err := s.Acquire(ctx, a); err != nil {
			t.Fatal(err)
		}
		resp := exchange.Response{Status: 201, Header: h, Body: []byte(fmt.Sprint(`{"n":`, i, `}`))}
		if err := s.Complete(ctx, ids[i], token, idem.Completion{Response: resp, CompletedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	for pass := range 2 {
		for i, h := range headers {
			got, err := s.Get(ctx, ids[i])
			if err != nil {
				t.Fatal(err)
			}
			rec, _, err := s.Acquire(ctx, idem.Acquire{ID: ids[i], Token: "other", Now: now,
				LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range []exchange.Response{got.Response, rec.Response} {
				if !sameHeader(r.Header, h) || string(r.Body) != fmt.Sprint(`{"n":`, i, `}`) || r.Status != 201 {
					t.Fatalf("pass %d, record %d: got %d %v %q, stored %v", pass, i, r.Status, r.Header, r.Body, h)
				}
				for _, f := range r.Header {
					if cap(f.Values) != len(f.Values) {
						t.Fatalf("record %d: the values of %s are not clipped: appending to them would write into another record's", i, f.Name)
					}
				}
				if cap(r.Header) != len(r.Header) {
					t.Fatalf("record %d: the header is not clipped", i)
				}
			}
		}
	}
	for i := range s.shards {
		if n := len(s.shards[i].shared); n > maxShared {
			t.Errorf("shard %d shares %d headers, more than %d", i, n, maxShared)
		}
	}
}

// sameHeader compares headers, a nil list of values equal to an empty one.
func sameHeader(a, b []exchange.HeaderField) bool {
	return slices.EqualFunc(a, b, func(x, y exchange.HeaderField) bool {
		return x.Name == y.Name && slices.Equal(x.Values, y.Values)
	})
}
