package gormstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemtest"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

func TestConformance(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			idemtest.TestStore(t, func(tb testing.TB) idem.Store {
				return newStore(tb, b.open(tb))
			})
		})
	}
}

// TestDo holds the store to what jobs, webhooks and queue consumers get
// from Engine.Do, on every dialect.
func TestDo(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			idemtest.TestDo(t, func(tb testing.TB) idem.Store { return newStore(tb, b.open(tb)) })
		})
	}
}

var (
	t0  = time.Date(2031, 3, 14, 15, 9, 26, 535_000_000, time.UTC)
	fpA = idem.Fingerprint{0: 'a'}
)

func acquireAt(id idem.ID, token string, now time.Time) idem.Acquire {
	return idem.Acquire{ID: id, Fingerprint: fpA, Token: token, Now: now,
		LeaseUntil: now.Add(30 * time.Second), ExpiresAt: now.Add(24 * time.Hour)}
}

// TestKeysCompareExactly: MySQL's default collations ignore case and
// trailing spaces; keys and scopes must not.
func TestKeysCompareExactly(t *testing.T) {
	ids := []idem.ID{
		{Scope: "acct", Key: "abc"},
		{Scope: "acct", Key: "ABC"},
		{Scope: "acct", Key: "abc "},
		{Scope: "acct", Key: " abc"},
		{Scope: "ACCT", Key: "abc"},
		{Scope: "acct ", Key: "abc"},
		{Scope: "", Key: "abc"},
		{Scope: "acct", Key: `a"b'c\d`},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, b.open(t))
			ctx := testCtx(t)
			for i, id := range ids {
				rec, o, err := s.Acquire(ctx, acquireAt(id, fmt.Sprint("tok-", i), t0))
				if err != nil || o != idem.AcquireCreated {
					t.Fatalf("Acquire(%q/%q) = %v, %v; want a new record: it differs from every ID before it", id.Scope, id.Key, o, err)
				}
				if rec.ID != id {
					t.Fatalf("record ID = %+v, want %+v", rec.ID, id)
				}
			}
			for i, id := range ids {
				rec, err := s.Get(ctx, id)
				if err != nil || rec.Token != fmt.Sprint("tok-", i) {
					t.Errorf("Get(%q/%q) = token %q, %v; want tok-%d", id.Scope, id.Key, rec.Token, err, i)
				}
			}
		})
	}
}

// TestRenewSameLease: renewing to the lease already stored keeps the lock
// (MySQL reports such an UPDATE as changing no row).
func TestRenewSameLease(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, b.open(t))
			ctx := testCtx(t)
			a := acquireAt(idem.ID{Key: "k"}, "tok", t0)
			if _, _, err := s.Acquire(ctx, a); err != nil {
				t.Fatal(err)
			}
			if err := s.Renew(ctx, a.ID, "tok", a.LeaseUntil); err != nil {
				t.Fatalf("Renew to the same lease: %v, want nil", err)
			}
			if err := s.Renew(ctx, a.ID, "other", a.LeaseUntil); !errors.Is(err, idem.ErrLockLost) {
				t.Fatalf("Renew by another token: %v, want ErrLockLost", err)
			}
		})
	}
}

// TestTimesExact: times survive to the nanosecond on every dialect.
func TestTimesExact(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, b.open(t))
			ctx := testCtx(t)
			now := time.Date(2030, 1, 2, 3, 4, 5, 123_456_789, time.FixedZone("X", 3600))
			a := acquireAt(idem.ID{Key: "k"}, "tok", now)
			if _, _, err := s.Acquire(ctx, a); err != nil {
				t.Fatal(err)
			}
			done := now.Add(1500 * time.Millisecond)
			c := idem.Completion{Response: exchange.Response{Status: 201}, CompletedAt: done, ExpiresAt: done.Add(time.Hour)}
			if err := s.Complete(ctx, a.ID, "tok", c); err != nil {
				t.Fatal(err)
			}
			rec, err := s.Get(ctx, a.ID)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				name      string
				got, want time.Time
			}{
				{"CreatedAt", rec.CreatedAt, now},
				{"LeaseUntil", rec.LeaseUntil, a.LeaseUntil},
				{"CompletedAt", rec.CompletedAt, done},
				{"ExpiresAt", rec.ExpiresAt, done.Add(time.Hour)},
			} {
				if !c.got.Equal(c.want) {
					t.Errorf("%s = %v, want %v exactly", c.name, c.got, c.want)
				}
			}
			if rec.Response.Body == nil || len(rec.Response.Header) != 0 {
				t.Errorf("empty response read back as body %v header %v, want an empty body and no header", rec.Response.Body, rec.Response.Header)
			}
		})
	}
}

// logRecorder is a GORM logger that keeps what it is asked to log.
type logRecorder struct {
	logger.Interface
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) LogMode(logger.LogLevel) logger.Interface { return l }

func (l *logRecorder) Trace(_ context.Context, _ time.Time, fc func() (string, int64), err error) {
	if err == nil {
		return
	}
	sql, _ := fc()
	l.mu.Lock()
	l.lines = append(l.lines, err.Error()+": "+sql)
	l.mu.Unlock()
}

// TestMySQLDuplicatesNotLogged: on MySQL a taken key is a failed INSERT,
// which is no error worth logging.
func TestMySQLDuplicatesNotLogged(t *testing.T) {
	base := openMySQL(t)
	rec := &logRecorder{Interface: logger.Discard}
	db := base.Session(&gorm.Session{Logger: rec})
	s := newStore(t, db)
	ctx := testCtx(t)
	a := acquireAt(idem.ID{Key: "k"}, "tok", t0)
	for i, want := range []idem.AcquireOutcome{idem.AcquireCreated, idem.AcquireExisting} {
		a.Token = fmt.Sprint("tok-", i)
		if _, o, err := s.Acquire(ctx, a); err != nil || o != want {
			t.Fatalf("Acquire %d = %v, %v; want %v", i, o, err, want)
		}
	}
	if len(rec.lines) != 0 {
		t.Fatalf("logged %q, want nothing", rec.lines)
	}
	// Real errors are still logged.
	_ = db.Exec("SELECT no_such_column FROM " + s.sql.quotedTableName).Error
	if len(rec.lines) != 1 {
		t.Fatalf("logged %q, want the failed SELECT", rec.lines)
	}
}

func TestNew(t *testing.T) {
	db := openSQLite(t)
	cases := []struct {
		name  string
		db    *gorm.DB
		table string
		ok    bool
	}{
		{"default", db, DefaultTable, true},
		{"schema", db, "main.idem", true},
		{"reserved word", db, "order", true},
		{"nil db", nil, "t", false},
		{"empty", db, "", false},
		{"quote", db, `a"b`, false},
		{"space", db, "a b", false},
		{"three parts", db, "a.b.c", false},
		{"too long", db, strings.Repeat("t", 49), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(c.db, WithTable(c.table), WithPurgeInterval(0))
			if (err == nil) != c.ok {
				t.Fatalf("New(table %q) error = %v, want ok=%v", c.table, err, c.ok)
			}
			if err != nil {
				return
			}
			defer s.Close()
			ctx := testCtx(t)
			if err := s.AutoMigrate(ctx); err != nil {
				t.Fatal(err)
			}
			if err := s.AutoMigrate(ctx); err != nil {
				t.Fatalf("AutoMigrate twice: %v", err)
			}
			if _, o, err := s.Acquire(ctx, acquireAt(idem.ID{Key: "k"}, "tok", t0)); err != nil || o != idem.AcquireCreated {
				t.Fatalf("Acquire on table %q = %v, %v", c.table, o, err)
			}
		})
	}
}

func TestUnsupportedDialect(t *testing.T) {
	db := openSQLite(t)
	other := &gorm.DB{Config: &gorm.Config{Dialector: renamed{db.Dialector}}}
	if _, err := New(other); err == nil || !strings.Contains(err.Error(), `"oracle"`) {
		t.Fatalf("New on an oracle dialector: %v, want an unsupported-dialect error", err)
	}
}

type renamed struct{ gorm.Dialector }

func (renamed) Name() string { return "oracle" }

// TestCorruptRecord: a damaged row is an error, never a wrong replay.
func TestCorruptRecord(t *testing.T) {
	db := openSQLite(t)
	s := newStore(t, db)
	ctx := testCtx(t)
	id := idem.ID{Key: "k"}
	if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, id, "tok", idem.Completion{Response: exchange.Response{Status: 200, Body: []byte("ok")}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, set string }{
		{"headers", "resp_headers = X'02'"},
		{"fingerprint", "fingerprint = X'00'"},
		{"state", "idem_state = 7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tx := db.Begin()
			defer tx.Rollback()
			if err := tx.Exec("UPDATE " + s.sql.quotedTableName + " SET " + c.set).Error; err != nil {
				t.Fatal(err)
			}
			_, err := getOn(s, tx.WithContext(ctx), id)
			if err == nil || errors.Is(err, idem.ErrNotFound) || !strings.Contains(err.Error(), "corrupt") {
				t.Fatalf("Get of a record with bad %s: %v, want a corruption error", c.name, err)
			}
		})
	}
}

// TestLargeBodies: 1 MiB bodies, the engine's default limit, many times over.
func TestLargeBodies(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, b.open(t))
			ctx := testCtx(t)
			for i := range 3 {
				body := bytes.Repeat([]byte{byte(i), 0, 0xff, '\n'}, 1<<18)
				id := idem.ID{Key: fmt.Sprint("k", i)}
				if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
					t.Fatal(err)
				}
				c := idem.Completion{Response: exchange.Response{Status: 200, Body: body}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}
				if err := s.Complete(ctx, id, "tok", c); err != nil {
					t.Fatal(err)
				}
				rec, err := s.Get(ctx, id)
				if err != nil || !bytes.Equal(rec.Response.Body, body) {
					t.Fatalf("body %d: %d bytes back (%v), want %d identical", i, len(rec.Response.Body), err, len(body))
				}
			}
		})
	}
}
