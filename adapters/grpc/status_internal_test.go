package idemgrpc

import (
	"context"
	"testing"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/memstore"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestLockStatus checks that every code is handed to Lock.Finish under a
// status the Engine stores exactly when the code is recorded (2xx, 3xx,
// 4xx but 408, 409, 425 and 429), and comes back as itself.
func TestLockStatus(t *testing.T) {
	for c := codes.Code(0); c <= 20; c++ {
		s := lockStatus(c)
		stored := s >= 200 && s < 500 && s != 408 && s != 409 && s != 425 && s != 429
		back, ok := recordedCode(s)
		switch recorded := c == codes.OK || Recorded(c); {
		case recorded != stored:
			t.Errorf("%v (recorded %v) is finished with status %d, which the Engine stores: %v", c, recorded, s, stored)
		case recorded && (!ok || back != c):
			t.Errorf("%v is recorded as %d, read back as %v (%v)", c, s, back, ok)
		case !recorded && ok:
			t.Errorf("%v is not recorded, but %d reads back as %v", c, s, back)
		}
	}
	for _, s := range []int{0, 201, 400, 460, 477, 499, 503} {
		if c, ok := recordedCode(s); ok {
			t.Errorf("status %d, which no call is recorded under, reads as %v", s, c)
		}
	}
}

func TestProblemMember(t *testing.T) {
	for _, detail := range []string{
		"plain",
		`with "quotes" and a \ backslash`,
		"control\ncharacters\t\x00\x1f",
		"non-ASCII: café ✓ and \xff invalid",
		`looks like a member: "type":"https://evil.example/x"`,
		"",
	} {
		body := exchange.Problem{Type: "https://p.test/key-invalid", Title: "t", Status: 400, Detail: detail}.Response().Body
		if got := problemMember(body, typeMember); got != "https://p.test/key-invalid" {
			t.Errorf("type of %s: %q", body, got)
		}
		want := detail
		if detail == "non-ASCII: café ✓ and \xff invalid" {
			want = "non-ASCII: café ✓ and \ufffd invalid" // the Engine replaces invalid UTF-8
		}
		if got := problemMember(body, detailMember); got != want {
			t.Errorf("detail of %s: %q, want %q", body, got, want)
		}
	}
	for _, body := range []string{"", `{"type":"unterminated`, `{"title":"no type"}`, `{"type":"bad \q escape"}`} {
		if got := problemMember([]byte(body), typeMember); got != "" {
			t.Errorf("type of %s: %q, want none", body, got)
		}
	}
}

func TestRefuseOthers(t *testing.T) {
	e := idem.New(idem.Config{Store: memstore.New(memstore.WithPurgeInterval(0))})
	r := newRefuser(e.Config(), KeyMetadata, false)
	// A client gone before its key was taken.
	if err := r.refuse(context.Background(), exchange.Response{Status: statusClientGone, Body: []byte{}}); status.Code(err) != codes.Canceled {
		t.Errorf("client gone: %v, want CANCELLED", err)
	}
	// A problem the interceptor has no code for: the Engine's own words.
	unreadable := exchange.Problem{Type: e.Config().ProblemBase + exchange.ProblemBodyUnreadable, Status: 400, Detail: "cannot read"}.Response()
	if err := r.refuse(context.Background(), unreadable); status.Code(err) != codes.Internal || status.Convert(err).Message() != "cannot read" {
		t.Errorf("unknown problem: %v", err)
	}
	// A problem type under another base is none of the Engine's.
	foreign := exchange.Problem{Type: "https://elsewhere.test/" + exchange.ProblemKeyMissing, Status: 400, Detail: "d"}.Response()
	if err := r.refuse(context.Background(), foreign); status.Code(err) != codes.Internal {
		t.Errorf("foreign problem: %v", err)
	}
}
