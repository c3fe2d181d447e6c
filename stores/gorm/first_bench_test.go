package gormstore

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"gorm.io/gorm"
)

// BenchmarkSQLiteFirst sets a request with a new key through an Engine on
// the SQLite store (Acquire, the handler, Complete) beside the same
// handler doing one plain INSERT through GORM instead, with no idemkit, on
// the same database file, as bench/ does over loopback: the ratio
// first/insert is the store's throughput as a fraction of the one-INSERT
// handler's. The two alternate in chunks of requests within one run, from
// conns goroutines at a time, so that both see the same machine; each run
// reports the ratio of its totals. Run it with -count and take the median:
//
//	go test -run '^$' -bench SQLiteFirst -count 5 -cpu 1 .
func BenchmarkSQLiteFirst(b *testing.B) {
	for _, conns := range []int{1, 16} {
		b.Run("c="+strconv.Itoa(conns), func(b *testing.B) { benchFirst(b, conns) })
	}
}

// BenchmarkSQLiteTxFirst is BenchmarkSQLiteFirst for the transactional
// completion: the handler INSERTs its order through Tx, and the completion
// commits in that transaction (tx), beside the same handler INSERTing alone
// with no idemkit (insert) and beside it behind idemkit with its INSERT in
// a statement of its own (separate). It reports tx/insert and
// separate/insert, the throughput of each over the INSERT alone's:
//
//	go test -run '^$' -bench SQLiteTxFirst -count 10 -cpu 1 .
func BenchmarkSQLiteTxFirst(b *testing.B) {
	for _, conns := range []int{1, 16} {
		b.Run("c="+strconv.Itoa(conns), func(b *testing.B) { benchTxFirst(b, openSQLite(b), conns) })
	}
}

// BenchmarkPostgresTxFirst is BenchmarkSQLiteTxFirst on PostgreSQL
// (IDEMKIT_TEST_POSTGRES_DSN), at 16 and 64 requests at a time:
//
//	go test -run '^$' -bench PostgresTxFirst -count 10 .
func BenchmarkPostgresTxFirst(b *testing.B) {
	for _, conns := range []int{16, 64} {
		b.Run("c="+strconv.Itoa(conns), func(b *testing.B) { benchTxFirst(b, openPostgres(b), conns) })
	}
}

func benchTxFirst(b *testing.B, db *gorm.DB, conns int) {
	s := newStore(b, db)
	createOrders(b, db)
	e := idem.New(idem.Config{Store: s, Logger: discardLogger})
	benchSides(b, conns, []string{"insert", "tx", "separate"}, []http.Handler{
		orderHandler(db, alone),
		TxMiddleware(idemhttp.Middleware(e)(orderHandler(db, inTx))),
		idemhttp.Middleware(e)(orderHandler(db, alone)),
	})
}

func createOrders(b *testing.B, db *gorm.DB) {
	id := "INTEGER PRIMARY KEY"
	if db.Dialector.Name() != "sqlite" {
		id = "BIGSERIAL PRIMARY KEY"
	}
	if err := db.Exec(`CREATE TABLE IF NOT EXISTS orders (id ` + id + `, item TEXT NOT NULL,
		quantity INTEGER NOT NULL, customer TEXT NOT NULL, note TEXT NOT NULL, created BIGINT NOT NULL)`).Error; err != nil {
		b.Fatal(err)
	}
}

// benchOrder is the request's body, about 100 bytes of JSON, decoded.
type benchOrder struct {
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
	Customer string `json:"customer"`
	Note     string `json:"note"`
}

var benchOrderBody = []byte(`{"item":"paperback-0042","quantity":3,"customer":"cus_8f14e45fceea167a","note":"leave it at the door"}`)

// How orderHandler writes its INSERT: in a statement of its own, or in
// the request's transaction (Tx).
const (
	alone = false
	inTx  = true
)

// orderHandler decodes the order and answers 201 with about 150 bytes of
// JSON; with db set it first INSERTs the order, as the baseline does, in
// the request's transaction if inTx.
func orderHandler(db *gorm.DB, inTx bool) http.Handler {
	var seq atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var o benchOrder
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil {
			http.Error(w, "bad JSON", http.StatusBadRequest)
			return
		}
		now := time.Now().Unix()
		if db != nil {
			x, err := db.WithContext(r.Context()), error(nil)
			if inTx {
				x, err = Tx(r.Context(), db)
			}
			if err == nil {
				err = x.Exec("INSERT INTO orders (item, quantity, customer, note, created) VALUES (?, ?, ?, ?, ?)",
					o.Item, o.Quantity, o.Customer, o.Note, now).Error
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": "ord_" + strconv.FormatInt(1e12+seq.Add(1), 10),
			"item": o.Item, "quantity": o.Quantity, "customer": o.Customer, "amount": 1999 * o.Quantity,
			"currency": "usd", "created": now})
	})
}

// nullWriter is a ResponseWriter that keeps the status only.
type nullWriter struct {
	header http.Header
	status int
}

func (w *nullWriter) Header() http.Header { return w.header }
func (w *nullWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}
func (w *nullWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}

// invoke sends the order to h with key as its Idempotency-Key, as
// net/http's server would hand it over, and returns the status.
func invoke(h http.Handler, key string) int {
	r := &http.Request{
		Method: http.MethodPost, URL: &url.URL{Path: "/orders"}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {key}},
		Body:   io.NopCloser(bytes.NewReader(benchOrderBody)), ContentLength: int64(len(benchOrderBody)),
		Host: "bench", RemoteAddr: "127.0.0.1:40000", RequestURI: "/orders",
	}
	r = r.WithContext(context.Background())
	w := &nullWriter{header: http.Header{}}
	h.ServeHTTP(w, r)
	return w.status
}

func benchFirst(b *testing.B, conns int) {
	db := openSQLite(b)
	s := newStore(b, db)
	createOrders(b, db)
	e := idem.New(idem.Config{Store: s, Logger: discardLogger})
	took := benchSides(b, conns, []string{"first", "insert"}, []http.Handler{idemhttp.Middleware(e)(orderHandler(nil, alone)), orderHandler(db, alone)})
	b.ReportMetric(float64(took[1])/float64(took[0]), "first/insert")
}

// benchSides sends requests with new keys to each of sides in turn, in
// chunks, from conns goroutines at a time, and reports each one's time
// per request (name-ns/op) and, after the first, its throughput over the
// first's (name/first's name); it returns the time each took.
func benchSides(b *testing.B, conns int, names []string, sides []http.Handler) []time.Duration {
	took := make([]time.Duration, len(sides))
	var next atomic.Int64
	// chunk runs n requests through h from conns goroutines and returns
	// how long they took.
	chunk := func(h http.Handler, n int) time.Duration {
		var wg sync.WaitGroup
		var left atomic.Int64
		left.Store(int64(n))
		start := time.Now()
		for range conns {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					key := "k-" + strconv.FormatInt(next.Add(1), 10)
					if status := invoke(h, key); status != http.StatusCreated {
						b.Errorf("status %d", status)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	// Warm both up: connections opened, pages cached.
	for i, h := range sides {
		took[i] = chunk(h, 200)
	}
	clear(took)
	const size = 250
	b.ResetTimer()
	for done := 0; done < b.N; done += size {
		n := min(size, b.N-done)
		for i, h := range sides {
			took[i] += chunk(h, n)
		}
	}
	b.StopTimer()
	for i, name := range names {
		b.ReportMetric(float64(took[i].Nanoseconds())/float64(b.N), name+"-ns/op")
		if i > 0 && names[0] != "first" {
			b.ReportMetric(float64(took[0])/float64(took[i]), name+"/"+names[0])
		}
	}
	return took
}
