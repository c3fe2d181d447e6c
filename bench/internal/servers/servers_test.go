package servers

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idemkit/bench/internal/httpwire"
)

func build(t *testing.T, framework, kind string) *Server {
	t.Helper()
	s, err := Build(Options{Framework: framework, Kind: kind, Dir: t.TempDir(), MaxRecords: 1 << 20})
	if err != nil {
		t.Fatalf("Build(%s, %s): %v", framework, kind, err)
	}
	t.Cleanup(s.Close)
	return s
}

func each(t *testing.T, f func(t *testing.T, framework, kind string)) {
	for _, fw := range Frameworks {
		for _, kind := range Kinds {
			if Valid(fw, kind) {
				t.Run(fw+"/"+kind, func(t *testing.T) { f(t, fw, kind) })
			}
		}
	}
}

// TestEveryServerAnswersAlike: the comparison is only fair if every
// configuration serves the same endpoint with the same answers.
func TestEveryServerAnswersAlike(t *testing.T) {
	each(t, func(t *testing.T, fw, kind string) {
		inv := build(t, fw, kind).Invoker()
		key := make([]byte, httpwire.KeyLen)
		httpwire.FormatKey(key, 1, 0, 0)
		if got := inv.Do(key); got != http.StatusCreated {
			t.Errorf("first request: %d, want 201", got)
		}
		if got := inv.Do(key); got != http.StatusCreated {
			t.Errorf("same key again: %d, want 201 (a replay, or the bare handler again)", got)
		}
		want := http.StatusCreated
		if kind == Mem || kind == SQLite {
			want = http.StatusBadRequest // idemkit requires the key
		}
		if got := inv.Do(nil); got != want {
			t.Errorf("no key: %d, want %d", got, want)
		}
	})
}

func TestValid(t *testing.T) {
	if Valid("gin", Builtin) || Valid("echov5", Builtin) || Valid("nethttp", "redis") || Valid("chi", Bare) ||
		!Valid("fiber", Builtin) || !Valid("fiberv3", Builtin) {
		t.Error("Valid accepts a configuration that does not exist, or refuses Fiber's built-in")
	}
	if _, err := Build(Options{Framework: "echo", Kind: Builtin}); err == nil {
		t.Error("Build accepted Echo with Fiber's built-in middleware")
	}
}

// TestServeOverTCP serves each framework on loopback and checks the sizes
// the benchmark advertises: about 100 bytes in, about 150 out, and a
// replay marked as such.
func TestServeOverTCP(t *testing.T) {
	if n := len(RequestBody); n < 90 || n > 110 {
		t.Errorf("request body is %d bytes, want about 100", n)
	}
	for _, fw := range Frameworks {
		t.Run(fw, func(t *testing.T) {
			s := build(t, fw, Mem)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go s.Serve(ln)
			defer ln.Close()
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			req, _ := httpwire.NewRequest(ln.Addr().String(), Path, "Idempotency-Key", RequestBody)
			key := make([]byte, httpwire.KeyLen)
			httpwire.FormatKey(key, 2, 0, 0)
			req.SetKey(key)
			br := bufio.NewReader(conn)
			for i, replay := range []bool{false, true} {
				if _, err := conn.Write(req.Bytes()); err != nil {
					t.Fatal(err)
				}
				var r httpwire.Response
				if err := httpwire.ReadResponse(br, &r); err != nil {
					t.Fatalf("response %d: %v", i, err)
				}
				if r.Status != 201 || r.Replayed != replay || r.BodyLen < 130 || r.BodyLen > 170 {
					t.Errorf("response %d: %+v, want 201 of about 150 bytes, replayed %v", i, r, replay)
				}
			}
		})
	}
}

func TestResponseShape(t *testing.T) {
	o := &orders{}
	var in order
	if err := json.Unmarshal(RequestBody, &in); err != nil {
		t.Fatal(err)
	}
	c, err := o.create(t.Context(), &in)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(c)
	if len(b) < 130 || len(b) > 170 {
		t.Errorf("response is %d bytes, want about 150: %s", len(b), b)
	}
}

func TestMeasure(t *testing.T) {
	s := build(t, "nethttp", Mem)
	for _, w := range []string{"First", "Replay", "NoKey"} {
		m, err := Measure(s.Invoker(), w, 20*time.Millisecond, 3)
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		want := map[string]int{"First": 201, "Replay": 201, "NoKey": 400}[w]
		if m.N == 0 || m.Status[want] != m.N || m.NsPerOp <= 0 || m.AllocsPerOp <= 0 {
			t.Errorf("%s: %+v, want every call %d and positive costs", w, m, want)
		}
	}
	if s.Mem.Len() < 2 {
		t.Errorf("store holds %d records after First", s.Mem.Len())
	}
	if _, err := Measure(s.Invoker(), "Burst", time.Millisecond, 3); err == nil {
		t.Error("unknown workload accepted")
	}
}

func TestFillAndCopy(t *testing.T) {
	mem := build(t, "nethttp", Mem)
	if err := FillThrough(mem.Invoker(), 1, 100); err != nil {
		t.Fatal(err)
	}
	if n := mem.Mem.Len(); n != 100 {
		t.Errorf("memory store holds %d records, want 100", n)
	}

	s := build(t, "nethttp", SQLite)
	live, err := s.CopyRecords(500, false)
	if err != nil {
		t.Fatal(err)
	}
	expired, err := s.CopyRecords(300, true)
	if err != nil {
		t.Fatal(err)
	}
	if live.Last-live.First+1 != 500 || expired.Last-expired.First+1 != 300 || expired.First <= live.Last {
		t.Errorf("ranges %+v and %+v", live, expired)
	}
	if n, err := s.CountRows(); err != nil || n != 802 { // two templates and the copies
		t.Errorf("CountRows = %d, %v; want 802", n, err)
	}
	// The store's own purge must see the expired copies as expired, and
	// only them.
	for {
		n, err := s.GORM.Purge(t.Context(), time.Now(), 1000)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if left, err := s.AnyLeft(expired); err != nil || left {
		t.Errorf("expired copies left after a purge: %v, %v", left, err)
	}
	if left, err := s.AnyLeft(live); err != nil || !left {
		t.Errorf("live copies purged: left %v, %v", left, err)
	}
	if n, _ := s.CountRows(); n != 501 {
		t.Errorf("%d rows after the purge, want the 501 live ones", n)
	}
	if _, err := mem.CopyRecords(1, false); err != ErrNoStore {
		t.Errorf("CopyRecords on the memory store: %v, want ErrNoStore", err)
	}
}
