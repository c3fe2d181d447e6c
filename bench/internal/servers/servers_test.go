package servers

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/bench/internal/httpwire"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/internal/costfloor"
)

func build(t *testing.T, framework, kind string) *Server {
	t.Helper()
	o := Options{Framework: framework, Kind: kind, Dir: t.TempDir(), MaxRecords: 1 << 20, Pool: 4}
	switch FleetEnv(kind) {
	case PostgresEnv:
		o.PostgresDSN = serverEnv(t, PostgresEnv)
	case RedisEnv:
		o.RedisAddr = serverEnv(t, RedisEnv)
	}
	s, err := Build(o)
	if err != nil {
		t.Fatalf("Build(%s, %s): %v", framework, kind, err)
	}
	t.Cleanup(s.Close)
	return s
}

// serverEnv returns the value of env, which locates a test server
// (scripts/test-all starts them). Without it the test fails, except under
// -short, where it is skipped so that a quick run needs no server.
func serverEnv(t *testing.T, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		if testing.Short() {
			t.Skipf("%s is not set; -short skips the configurations that need its server", env)
		}
		t.Fatalf("%s is not set: run the tests with `make test` (scripts/test-all), which starts the servers, "+
			"or `source scripts/servers.sh && start_servers` and `source scripts/redis-servers.sh && start_redis_servers` first", env)
	}
	return v
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
		s := build(t, fw, kind)
		inv := s.Invoker()
		key := make([]byte, httpwire.KeyLen)
		httpwire.FormatKey(key, 1, 0, 0)
		if got := inv.Do(key); got != http.StatusCreated {
			t.Errorf("first request: %d, want 201", got)
		}
		if got := inv.Do(key); got != http.StatusCreated {
			t.Errorf("same key again: %d, want 201 (a replay, or the bare handler again)", got)
		}
		want := http.StatusCreated
		if s.Engine != nil || kind == Lean {
			want = http.StatusBadRequest // idemkit and minimal-lean require the key
		}
		if got := inv.Do(nil); got != want {
			t.Errorf("no key: %d, want %d", got, want)
		}
	})
}

func TestValid(t *testing.T) {
	if Valid("gin", Builtin) || Valid("echov5", Builtin) || Valid("nethttp", "memcached") || Valid("chi", Bare) ||
		!Valid("fiber", Builtin) || !Valid("fiberv3", Builtin) {
		t.Error("Valid accepts a configuration that does not exist, or refuses Fiber's built-in")
	}
	for _, kind := range []string{Postgres, PGInsert, Redis, SetNX} {
		if !Valid("nethttp", kind) || Valid("gin", kind) || Valid("fiber", kind) || !Fleet(kind) {
			t.Errorf("%s: a fleet kind is built on net/http alone", kind)
		}
	}
	if Fleet(SQLite) || Fleet(Bare) {
		t.Error("a kind without a server of its own counted as a fleet kind")
	}
	if _, err := Build(Options{Framework: "nethttp", Kind: Redis}); err == nil || !strings.Contains(err.Error(), RedisEnv) {
		t.Errorf("Build without a Redis address: %v, want an error naming %s", err, RedisEnv)
	}
	if _, err := Build(Options{Framework: "nethttp", Kind: PGInsert}); err == nil || !strings.Contains(err.Error(), PostgresEnv) {
		t.Errorf("Build without a PostgreSQL DSN: %v, want an error naming %s", err, PostgresEnv)
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

// TestFleetServersStartEmptyAndCleanUp: each fleet server writes in a
// table or under a key prefix of its own, so that no run sees another's
// keys, one write per new order for the baselines and a record per key for
// idemkit, and Close removes what it wrote.
func TestFleetServersStartEmptyAndCleanUp(t *testing.T) {
	for _, kind := range []string{Postgres, PGInsert, PGTx, Redis, SetNX} {
		t.Run(kind, func(t *testing.T) {
			a, b := build(t, "nethttp", kind), build(t, "nethttp", kind)
			if a.Namespace == "" || a.Namespace == b.Namespace {
				t.Fatalf("namespaces %q and %q, want two of their own", a.Namespace, b.Namespace)
			}
			key := make([]byte, httpwire.KeyLen)
			for i := range 3 {
				httpwire.FormatKey(key, 5, 0, uint64(i))
				if got := a.Invoker().Do(key); got != http.StatusCreated {
					t.Fatalf("request %d: %d, want 201", i, got)
				}
			}
			httpwire.FormatKey(key, 5, 0, 0) // the same key on the other server
			if got := b.Invoker().Do(key); got != http.StatusCreated {
				t.Fatalf("other server: %d, want 201", got)
			}
			if n := written(t, b, a.Namespace); n != 3 {
				t.Errorf("%d rows or keys after 3 requests, want 3", n)
			}
			if n := written(t, a, b.Namespace); n != 1 {
				t.Errorf("the other server holds %d rows or keys, want its 1", n)
			}
			if kind == SetNX {
				ttl, err := a.Redis.PTTL(t.Context(), a.Namespace+"ord_1000000000001").Result()
				want := build(t, "nethttp", Redis).Engine.Config().TTL
				if err != nil || ttl <= want-time.Minute || ttl > want {
					t.Errorf("the baseline's key expires in %v (%v), want about %v, as the store's records", ttl, err, want)
				}
			}
			if kind == PGTx {
				if n := written(t, b, a.Namespace+"_orders"); n != 3 {
					t.Errorf("%d orders after 3 requests, want 3", n)
				}
			}
			a.Close()
			if kind == PGTx {
				if n := written(t, b, a.Namespace+"_orders"); n != 0 {
					t.Errorf("%d orders left after Close, want none", n)
				}
			}
			if n := written(t, b, a.Namespace); n != 0 {
				t.Errorf("%d rows or keys left after Close, want none", n)
			}
			if n := written(t, b, b.Namespace); n != 1 {
				t.Errorf("closing one server left the other %d rows or keys, want its 1", n)
			}
		})
	}
}

// TestTxServersCommitTheOrderWithTheRecord: the transactional
// configurations' handlers INSERT in the request's transaction, committed
// with the stored response: a new key leaves one order and a completed
// record, its retry neither runs the handler nor writes again, and the
// same handler with its INSERT alone writes once per request.
func TestTxServersCommitTheOrderWithTheRecord(t *testing.T) {
	for _, kind := range []string{SQLiteTx, PGTx} {
		t.Run(kind, func(t *testing.T) {
			s := build(t, "nethttp", kind)
			orders := "orders"
			if kind == PGTx {
				orders = s.Namespace + "_orders"
			}
			count := func() (n int64) {
				if err := s.DB.Raw(`SELECT count(*) FROM "` + orders + `"`).Scan(&n).Error; err != nil {
					t.Fatal(err)
				}
				return n
			}
			key := make([]byte, httpwire.KeyLen)
			httpwire.FormatKey(key, 7, 0, 0)
			for i := range 2 {
				if got := s.Invoker().Do(key); got != http.StatusCreated {
					t.Fatalf("request %d: %d, want 201", i, got)
				}
			}
			if n := count(); n != 1 {
				t.Errorf("%d orders after a request and its retry, want 1", n)
			}
			k, err := idem.ParseKey([]string{string(key)}, false)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := s.GORM.Get(t.Context(), idem.ID{Key: k})
			if err != nil || rec.State != idem.Completed {
				t.Errorf("the key's record: %+v, %v; want it completed", rec, err)
			}
		})
	}
}

// written counts, through s's connections, the rows of table ns (0 if it
// is gone) or the keys under prefix ns.
func written(t *testing.T, s *Server, ns string) int64 {
	t.Helper()
	if s.Redis != nil {
		keys, err := s.Redis.Keys(t.Context(), ns+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return int64(len(keys))
	}
	var exists bool
	if err := s.DB.Raw("SELECT to_regclass(?) IS NOT NULL", `"`+ns+`"`).Scan(&exists).Error; err != nil {
		t.Fatal(err)
	}
	var n int64
	if exists {
		if err := s.DB.Raw(`SELECT count(*) FROM "` + ns + `"`).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// TestAblation: an ablated memory-store configuration keeps nothing in the
// store, and the other configurations ignore the option.
func TestAblation(t *testing.T) {
	for _, fw := range []string{"nethttp", "fiber"} {
		s, err := Build(Options{Framework: fw, Kind: Mem, MaxRecords: 1 << 20, Ablation: costfloor.NoStore})
		if err != nil {
			t.Fatal(err)
		}
		inv := s.Invoker()
		key := make([]byte, httpwire.KeyLen)
		httpwire.FormatKey(key, 1, 0, 0)
		for range 2 {
			if got := inv.Do(key); got != http.StatusCreated {
				t.Errorf("%s: %d, want 201", fw, got)
			}
		}
		if n := s.Mem.Stats().Records; n != 0 {
			t.Errorf("%s: the memory store holds %d records with the store taken out", fw, n)
		}
		s.Close()
	}
	s, err := Build(Options{Framework: "nethttp", Kind: Mem, MaxRecords: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := make([]byte, httpwire.KeyLen)
	httpwire.FormatKey(key, 1, 0, 0)
	s.Invoker().Do(key)
	if n := s.Mem.Stats().Records; n != 1 {
		t.Errorf("idemkit as shipped: the memory store holds %d records, want 1", n)
	}
}
