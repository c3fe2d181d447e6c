package gormstore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/internal/testservers"
	"gorm.io/gorm"
)

// sep is what joins one more parameter to dsn.
func sep(dsn string) string {
	if strings.Contains(dsn, "?") {
		return "&"
	}
	return "?"
}

// awkwardIDs are scopes and keys a tenant function or a client can produce
// that a text or varbinary(255) column mishandles: longer than 255 bytes
// (a JWT used as tenant), sharing a long prefix, not UTF-8, holding NUL,
// and the empty scope. Each must be a record of its own.
func awkwardIDs() []idem.ID {
	jwt := "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9." + strings.Repeat("eyJzdWIiOiJhY2N0XzEifQ", 12) + ".sig"
	prefix := strings.Repeat("p", 255)
	return []idem.ID{
		{Scope: jwt, Key: "k"},
		{Scope: jwt + "x", Key: "k"},
		{Scope: prefix, Key: "k"},
		{Scope: prefix + "a", Key: "k"},
		{Scope: prefix + "b", Key: "k"},
		{Scope: strings.Repeat("s", 64<<10), Key: "k"},
		{Scope: "acct\xff", Key: "k"},
		{Scope: "acct\xfe", Key: "k"},
		{Scope: "acct\x00", Key: "k"},
		{Scope: "acct", Key: "k\x00"},
		{Scope: "acct", Key: "k"},
		{Scope: "", Key: "k"},
		{Scope: "\xc3\x28", Key: "\xff\xfe"},
		{Scope: "acct", Key: strings.Repeat("k", 255) + "1"},
		{Scope: "acct", Key: strings.Repeat("k", 255) + "2"},
		{Scope: "acct", Key: strings.Repeat("\x80", 1000)},
	}
}

// TestAnyScopeAndKey: every byte string is a valid scope and key on every
// dialect, and two different IDs never share a record, however long
// their common prefix: a tenant whose scope is cut to a column's length
// would see another tenant's records.
func TestAnyScopeAndKey(t *testing.T) {
	ids := awkwardIDs()
	// MySQL outside strict mode cuts an overlong value to the column's
	// length instead of failing: tenants sharing a prefix would collide.
	nonStrict := backend{name: "mysql-nonstrict", open: ownServerPool(testservers.MySQLDSN, func(dsn string) gorm.Dialector {
		return dialMySQL(dsn + sep(dsn) + "sql_mode=%27%27")
	})}
	for _, b := range append(backends[:len(backends):len(backends)], nonStrict) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, b.open(t))
			ctx := testCtx(t)
			for i, id := range ids {
				a := acquireAt(id, fmt.Sprint("tok-", i), t0)
				rec, o, err := s.Acquire(ctx, a)
				if err != nil || o != idem.AcquireCreated {
					t.Fatalf("Acquire(ID %d, scope of %d bytes) = %v, %v; want a new record", i, len(id.Scope), o, err)
				}
				if rec.ID != id {
					t.Fatalf("ID %d: record ID differs from the one acquired", i)
				}
			}
			for i, id := range ids {
				c := idem.Completion{Response: exchange.Response{Status: 201, Body: []byte(fmt.Sprint("body-", i))},
					CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}
				if err := s.Complete(ctx, id, fmt.Sprint("tok-", i), c); err != nil {
					t.Fatalf("Complete(ID %d) = %v", i, err)
				}
			}
			for i, id := range ids {
				rec, err := s.Get(ctx, id)
				if err != nil || rec.ID != id || rec.Token != fmt.Sprint("tok-", i) ||
					!bytes.Equal(rec.Response.Body, []byte(fmt.Sprint("body-", i))) {
					t.Fatalf("Get(ID %d) = token %q, body %q, %v; want tok-%d's record", i, rec.Token, rec.Response.Body, err, i)
				}
				// A replay finds the record, and a retry of the same ID
				// is not a new key.
				if _, o, err := s.Acquire(ctx, acquireAt(id, "late", t0.Add(time.Minute))); err != nil || o != idem.AcquireExisting {
					t.Fatalf("Acquire(ID %d) again = %v, %v; want Existing", i, o, err)
				}
			}
			// The renewal, release and purge paths find them too.
			id := ids[0]
			if _, o, err := s.Acquire(ctx, acquireAt(id, "tok-2h", t0.Add(2*time.Hour))); err != nil || o != idem.AcquireCreated {
				t.Fatalf("Acquire of an expired ID = %v, %v; want Created", o, err)
			}
			if err := s.Renew(ctx, id, "tok-2h", t0.Add(3*time.Hour)); err != nil {
				t.Fatalf("Renew: %v", err)
			}
			if err := s.Release(ctx, id, "tok-2h"); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if n, err := s.Purge(ctx, t0.Add(2*time.Hour), 100); err != nil || n != len(ids)-1 {
				t.Fatalf("Purge = %d, %v; want the %d other records", n, err, len(ids)-1)
			}
		})
	}
}

// TestCorruptRecordKeepsTheKeySecret: the error for a damaged record,
// which the Engine logs and spans record, names the key by a hash only.
func TestCorruptRecordKeepsTheKeySecret(t *testing.T) {
	db := openSQLite(t)
	s := newStore(t, db)
	ctx := testCtx(t)
	id := idem.ID{Scope: "tenant-secret", Key: "secret-key-4711"}
	if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, id, "tok", idem.Completion{Response: exchange.Response{Status: 201}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("UPDATE " + s.sql.quotedTableName + " SET idem_state = 7").Error; err != nil {
		t.Fatal(err)
	}
	_, err := s.Get(ctx, id)
	if err == nil || errors.Is(err, idem.ErrNotFound) || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("Get of a corrupt record: %v, want a corruption error", err)
	}
	if strings.Contains(err.Error(), "4711") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("the corruption error %q carries the key or scope in clear", err)
	}
	sum := sha256.Sum256([]byte(id.Key))
	if h := hex.EncodeToString(sum[:6]); !strings.Contains(err.Error(), h) {
		t.Fatalf("the corruption error %q does not name the key's hash %s, which the Engine's logs use", err, h)
	}
}
