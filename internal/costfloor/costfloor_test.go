package costfloor

import (
	"context"
	"errors"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/memstore"
)

func TestParse(t *testing.T) {
	for _, s := range []string{"", "none"} {
		if a, err := Parse(s); err != nil || a != None {
			t.Errorf("Parse(%q) = %q, %v; want None", s, a, err)
		}
	}
	for _, a := range Ablations {
		if got, err := Parse(string(a)); err != nil || got != a {
			t.Errorf("Parse(%q) = %q, %v", a, got, err)
		}
	}
	if _, err := Parse("no-engine"); err == nil {
		t.Error("Parse accepted an unknown ablation")
	}
}

// runs sends the same key twice and reports whether each request ran.
func runs(t *testing.T, e *idem.Engine, bodies ...string) []bool {
	t.Helper()
	var ran []bool
	for _, b := range bodies {
		r := exchange.Request{Method: "POST", Path: "/v1/charges", KeyLines: []string{`"k"`},
			ContentType: "application/json", Body: []byte(b)}
		d := e.Adapter().Begin(context.Background(), r)
		ran = append(ran, d.Lock != nil)
		if d.Lock != nil {
			if f := d.Lock.Finish(context.Background(), 201, nil); f.Outcome != exchange.Recorded {
				t.Fatalf("Finish: %+v", f)
			}
		}
	}
	return ran
}

func newEngine(t *testing.T, a Ablation) *idem.Engine {
	s := memstore.New(memstore.WithPurgeInterval(0))
	t.Cleanup(func() { s.Close() })
	return idem.New(a.Apply(idem.Config{Store: s}))
}

// TestAblations: each ablation takes out what it names, and nothing else.
func TestAblations(t *testing.T) {
	// The default: a retry is replayed, a retry re-encoded too.
	if got := runs(t, newEngine(t, None), `{"a":1,"b":2}`, `{"b":2, "a":1}`); got[0] != true || got[1] != false {
		t.Errorf("None: ran %v, want [true false]", got)
	}
	// A raw fingerprint still stores, but tells a re-encoded retry apart (422).
	e := newEngine(t, RawFingerprint)
	if got := runs(t, e, `{"a":1,"b":2}`, `{"a":1,"b":2}`); got[0] != true || got[1] != false {
		t.Errorf("RawFingerprint: ran %v, want [true false]", got)
	}
	r := exchange.Request{Method: "POST", Path: "/v1/charges", KeyLines: []string{`"k"`}, ContentType: "application/json",
		Body: []byte(`{"b":2, "a":1}`)}
	if d := e.Adapter().Begin(context.Background(), r); d.Lock != nil || d.Response.Status != 422 {
		t.Errorf("RawFingerprint: a re-encoded retry got %d, want 422", d.Response.Status)
	}
	// Without a store every request runs, the same key included.
	for _, a := range []Ablation{NoStore, NoStoreNoFingerprint} {
		e := newEngine(t, a)
		if got := runs(t, e, `{"a":1}`, `{"a":1}`, `{"a":2}`); got[0] != true || got[1] != true || got[2] != true {
			t.Errorf("%s: ran %v, want every request to run", a, got)
		}
		if _, err := (nothingStored{}).Get(context.Background(), idem.ID{Key: "k"}); !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("%s: Get = %v, want ErrNotFound", a, err)
		}
	}
}
