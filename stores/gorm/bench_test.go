package gormstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// The benchmarks set the store's calls beside a baseline of the same
// number of plain SQL statements through database/sql on the same table,
// so that the ratio of the two is the store's own overhead (GORM, encoding,
// the conflict handling):
//
//	acquire+complete  Acquire of a new key (INSERT) + Complete (UPDATE)
//	                  vs INSERT + UPDATE by primary key
//	replay            Acquire of a completed key (INSERT that does nothing
//	                  + SELECT by primary key) vs SELECT by primary key
//	get               Get vs SELECT by primary key
//
// Run them with the servers up:
//
//	go test -run '^$' -bench . -benchmem

var benchResponse = exchange.Response{
	Status: 201,
	Header: []exchange.HeaderField{
		{Name: "Content-Type", Values: []string{"application/json"}},
		{Name: "Location", Values: []string{"/v1/charges/ch_1"}},
	},
	Body: []byte(`{"id":"ch_1","amount":1999,"currency":"eur","status":"succeeded","created":1700000000}`),
}

// baseline holds the plain statements, with the dialect's placeholders.
type baseline struct {
	db                      *sql.DB
	insert, update, select_ string
}

func newBaseline(b *testing.B, s *Store) baseline {
	sqlDB, err := s.db.DB()
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	ph := func() string {
		n++
		if s.dialect == dialectPostgres {
			return fmt.Sprint("$", n)
		}
		return "?"
	}
	t := s.sql.quotedTableName
	var bl baseline
	bl.db = sqlDB
	vals := make([]string, 8)
	for i := range vals {
		vals[i] = ph()
	}
	bl.insert = "INSERT INTO " + t + " (scope_hash, key_hash, fingerprint, idem_state, owner_token, lease_until, created_at, expires_at, resp_status) VALUES (" +
		strings.Join(vals, ", ") + ", 0)"
	n = 0
	bl.update = "UPDATE " + t + " SET idem_state = 2, resp_status = " + ph() + ", resp_headers = " + ph() + ", resp_body = " + ph() +
		", completed_at = " + ph() + ", expires_at = " + ph() + " WHERE scope_hash = " + ph() + " AND key_hash = " + ph()
	n = 0
	bl.select_ = "SELECT fingerprint, idem_state, owner_token, lease_until, created_at, completed_at, expires_at, resp_status, resp_headers, resp_body FROM " +
		t + " WHERE scope_hash = " + ph() + " AND key_hash = " + ph()
	return bl
}

// rawKey is a 32-byte key column value made without hashing, for the
// baselines' own rows.
func rawKey(s string) []byte {
	b := make([]byte, 32)
	copy(b, s)
	return b
}

// read reads the row whose key columns hold scope and key.
func (bl baseline) read(ctx context.Context, b *testing.B, scope, key []byte) {
	var (
		fp, header, body        []byte
		state                   int16
		token                   string
		lease, created, expires int64
		completed               sql.NullInt64
		status                  int
	)
	err := bl.db.QueryRowContext(ctx, bl.select_, scope, key).Scan(&fp, &state, &token, &lease, &created, &completed, &expires, &status, &header, &body)
	if err != nil {
		b.Fatal(err)
	}
}

var benchBackends = []string{"sqlite", "postgres", "mysql"}

// benchCtx is a context with a deadline, as the Engine gives every store
// call (Config.StoreTimeout): on SQLite the store bounds its wait for the
// write lock by it, which costs a few statements of its own.
func benchCtx(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	b.Cleanup(cancel)
	return ctx
}

func BenchmarkAcquireComplete(b *testing.B) {
	for _, name := range benchBackends {
		b.Run(name+"/store", func(b *testing.B) {
			s := newStore(b, backendNamed(name).open(b))
			ctx := benchCtx(b)
			now := time.Now()
			i := 0
			for b.Loop() {
				i++
				a := acquireAt(idem.ID{Scope: "bench", Key: fmt.Sprint("k-", i)}, "tok", now)
				if _, o, err := s.Acquire(ctx, a); err != nil || o != idem.AcquireCreated {
					b.Fatal(o, err)
				}
				c := idem.Completion{Response: benchResponse, CompletedAt: now, ExpiresAt: now.Add(time.Hour)}
				if err := s.Complete(ctx, a.ID, "tok", c); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/baseline", func(b *testing.B) { benchBaselineWrite(b, name, false) })
		b.Run(name+"/baseline-with-read", func(b *testing.B) { benchBaselineWrite(b, name, true) })
	}
}

// benchBaselineWrite is INSERT + UPDATE by primary key, and with read the
// SELECT that finds no record first, as Acquire does.
func benchBaselineWrite(b *testing.B, name string, read bool) {
	s := newStore(b, backendNamed(name).open(b))
	bl := newBaseline(b, s)
	ctx := context.Background()
	now := time.Now()
	i := 0
	scope := rawKey("bench")
	for b.Loop() {
		i++
		key := rawKey(fmt.Sprint("k-", i))
		if read {
			if err := bl.db.QueryRowContext(ctx, bl.select_, scope, key).Scan(new([]byte)); err != sql.ErrNoRows {
				b.Fatal(err)
			}
		}
		a := acquireAt(idem.ID{}, "tok", now)
		if _, err := bl.db.ExecContext(ctx, bl.insert, scope, key, a.Fingerprint[:], 1, "tok",
			nanos(a.LeaseUntil), nanos(now), nanos(a.ExpiresAt)); err != nil {
			b.Fatal(err)
		}
		if _, err := bl.db.ExecContext(ctx, bl.update, benchResponse.Status, appendHeader(nil, benchResponse.Header),
			benchResponse.Body, nanos(now), nanos(now.Add(time.Hour)), scope, key); err != nil {
			b.Fatal(err)
		}
	}
}

// completedRecord stores one completed record to read back.
func completedRecord(b *testing.B, s *Store, now time.Time) idem.Acquire {
	a := acquireAt(idem.ID{Scope: "bench", Key: "replayed"}, "tok", now)
	ctx := benchCtx(b)
	if _, _, err := s.Acquire(ctx, a); err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(ctx, a.ID, "tok", idem.Completion{Response: benchResponse, CompletedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		b.Fatal(err)
	}
	return a
}

func BenchmarkReplay(b *testing.B) {
	for _, name := range benchBackends {
		b.Run(name+"/store", func(b *testing.B) {
			s := newStore(b, backendNamed(name).open(b))
			now := time.Now()
			a := completedRecord(b, s, now)
			a.Token = "tok-2"
			ctx := benchCtx(b)
			for b.Loop() {
				rec, o, err := s.Acquire(ctx, a)
				if err != nil || o != idem.AcquireExisting || rec.Response.Status != 201 {
					b.Fatal(o, err)
				}
			}
		})
		b.Run(name+"/get", func(b *testing.B) {
			s := newStore(b, backendNamed(name).open(b))
			a := completedRecord(b, s, time.Now())
			ctx := benchCtx(b)
			for b.Loop() {
				if _, err := s.Get(ctx, a.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/baseline", func(b *testing.B) {
			s := newStore(b, backendNamed(name).open(b))
			a := completedRecord(b, s, time.Now())
			bl := newBaseline(b, s)
			ctx := context.Background()
			scope, key := hashID(a.ID)
			for b.Loop() {
				bl.read(ctx, b, scope, key)
			}
		})
	}
}
