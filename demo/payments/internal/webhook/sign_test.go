package webhook

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The Standard Webhooks specification's test vector.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func vectorHeader(sig string, ts int64) func(string) string {
	h := http.Header{}
	h.Set(HeaderID, vectorID)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSignature, sig)
	return h.Get
}

// TestSignMatchesTheSpecification: the signature of the specification's
// test vector, so that any Standard Webhooks library checks the demo's
// webhooks and the demo checks theirs.
func TestSignMatchesTheSpecification(t *testing.T) {
	s, err := ParseSecret(vectorSecret)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Sign(vectorID, time.Unix(vectorTimestamp, 0), []byte(vectorBody)); got != vectorSignature {
		t.Fatalf("Sign = %s, want %s", got, vectorSignature)
	}
	if err := s.Verify(vectorHeader(vectorSignature, vectorTimestamp), []byte(vectorBody), time.Unix(vectorTimestamp, 0)); err != nil {
		t.Fatalf("Verify of the specification's vector: %v", err)
	}
	if s.String() != vectorSecret {
		t.Fatalf("String = %s, want %s", s.String(), vectorSecret)
	}
}

func TestVerifyRefuses(t *testing.T) {
	s, _ := ParseSecret(vectorSecret)
	other := NewSecret()
	at := time.Unix(vectorTimestamp, 0)
	body := []byte(vectorBody)
	valid := vectorHeader(vectorSignature, vectorTimestamp)
	for name, c := range map[string]struct {
		header func(string) string
		body   string
		now    time.Time
		want   error
	}{
		"tampered body":        {valid, `{"test": 2432232315}`, at, ErrUnsigned},
		"another secret":       {vectorHeader(other.Sign(vectorID, at, body), vectorTimestamp), vectorBody, at, ErrUnsigned},
		"another id":           {with(valid, HeaderID, "msg_other"), vectorBody, at, ErrUnsigned},
		"another timestamp":    {vectorHeader(vectorSignature, vectorTimestamp+1), vectorBody, at, ErrUnsigned},
		"no id":                {with(valid, HeaderID, ""), vectorBody, at, ErrUnsigned},
		"no timestamp":         {with(valid, HeaderTimestamp, ""), vectorBody, at, ErrUnsigned},
		"no signature":         {vectorHeader("", vectorTimestamp), vectorBody, at, ErrUnsigned},
		"timestamp not a time": {with(valid, HeaderTimestamp, "soon"), vectorBody, at, ErrUnsigned},
		"only another scheme":  {vectorHeader("v1a,"+strings.TrimPrefix(vectorSignature, "v1,"), vectorTimestamp), vectorBody, at, ErrUnsigned},
		"signature not base64": {vectorHeader("v1,***", vectorTimestamp), vectorBody, at, ErrUnsigned},
		"six minutes old":      {valid, vectorBody, at.Add(6 * time.Minute), ErrStale},
		"six minutes ahead":    {valid, vectorBody, at.Add(-6 * time.Minute), ErrStale},
	} {
		err := s.Verify(c.header, []byte(c.body), c.now)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Verify = %v, want %v", name, err, c.want)
		}
	}
	// Within the tolerance, and among signatures of other keys (a secret
	// being rotated) and other schemes, wherever the good one stands.
	bad := other.Sign(vectorID, at, body)
	for _, several := range []string{
		"v1a,xyz " + bad + " " + vectorSignature,
		vectorSignature + " " + bad + " v1a,xyz",
		bad + " " + vectorSignature + " v1,***",
	} {
		for _, now := range []time.Time{at.Add(Tolerance), at.Add(-Tolerance)} {
			if err := s.Verify(vectorHeader(several, vectorTimestamp), body, now); err != nil {
				t.Errorf("at %v from the timestamp, in %q: %v", now.Sub(at), several, err)
			}
		}
	}
	// Stale and signed with another key: the signature is refused first,
	// so that no one learns anything from which check failed (see Verify).
	for _, now := range []time.Time{at.Add(6 * time.Minute), at.Add(-6 * time.Minute)} {
		err := s.Verify(vectorHeader(bad, vectorTimestamp), body, now)
		if !errors.Is(err, ErrUnsigned) || errors.Is(err, ErrStale) {
			t.Errorf("stale and signed with another key, %v from the timestamp: %v, want %v alone", now.Sub(at), err, ErrUnsigned)
		}
	}
}

// TestVerifyComparesInConstantTime: Verify compares the signatures with
// hmac.Equal or crypto/subtle, whose time does not depend on where two
// MACs first differ; a comparison with ==, bytes.Equal or bytes.Compare
// would let an attacker find a valid signature byte by byte. No test of
// behaviour can see the difference, so this reads the source.
func TestVerifyComparesInConstantTime(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "sign.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var verify *ast.FuncDecl
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "Verify" {
			verify = fn
		}
	}
	if verify == nil {
		t.Fatal("sign.go has no Verify")
	}
	constant := 0
	ast.Inspect(verify.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, _ := sel.X.(*ast.Ident)
			switch name := fmt.Sprintf("%v.%s", pkg, sel.Sel.Name); name {
			case "hmac.Equal", "subtle.ConstantTimeCompare":
				constant++
			case "bytes.Equal", "bytes.Compare", "strings.Compare", "strings.EqualFold":
				t.Errorf("Verify calls %s", name)
			}
		case *ast.BinaryExpr:
			if n.Op == token.EQL || n.Op == token.NEQ {
				for _, side := range []ast.Expr{n.X, n.Y} {
					if call, ok := side.(*ast.CallExpr); ok {
						if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "string" {
							t.Errorf("Verify compares a conversion to string with %s", n.Op)
							return false
						}
					}
				}
			}
		}
		return true
	})
	if constant == 0 {
		t.Error("Verify calls neither hmac.Equal nor subtle.ConstantTimeCompare")
	}
}

// with is header h with field name set to value.
func with(h func(string) string, name, value string) func(string) string {
	return func(n string) string {
		if n == name {
			return value
		}
		return h(n)
	}
}

func TestParseSecret(t *testing.T) {
	for _, ok := range []string{vectorSecret, strings.TrimPrefix(vectorSecret, "whsec_"), NewSecret().String()} {
		s, err := ParseSecret(ok)
		if err != nil {
			t.Errorf("ParseSecret(%q): %v", ok, err)
			continue
		}
		if again, err := ParseSecret(s.String()); err != nil || string(again) != string(s) {
			t.Errorf("ParseSecret(%q).String() does not read back: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "whsec_", "whsec_not base64!", "whsec_c2hvcnQ=", "whsec_" + strings.Repeat("QUFB", 30)} {
		if _, err := ParseSecret(bad); err == nil {
			t.Errorf("ParseSecret(%q) accepted", bad)
		}
	}
}
