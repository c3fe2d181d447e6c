package gormstore

import (
	"bytes"
	"context"
	"errors"
	"log"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestKeysNeverLogged: the store runs on the user's *gorm.DB, whose logger
// may print every statement with its values (GORM's default logger prints
// failed and slow ones). Neither a key nor a scope nor a stored response
// may reach it, nor the
// store's own log, nor the errors the Engine logs, whatever happens:
// statements that succeed, statements that fail (here, on a dropped
// table), and the completion inside the request's transaction.
func TestKeysNeverLogged(t *testing.T) {
	// The response is a parameter too: a body may carry personal data.
	const scope, key, body = "tenant-secret-7a3f", "key-secret-u-1", `{"card":"secret-4242"}`
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			var gormLog, storeLog lockedBuffer
			db := b.open(t).Session(&gorm.Session{Logger: logger.New(log.New(&gormLog, "", 0),
				logger.Config{LogLevel: logger.Info, SlowThreshold: time.Nanosecond})})
			s := newStore(t, db, WithLogger(slog.New(slog.NewTextHandler(&storeLog, &slog.HandlerOptions{Level: slog.LevelDebug}))))
			ctx := testCtx(t)
			id := idem.ID{Scope: scope, Key: key}
			var errs []error
			check := func(err error) {
				if err != nil {
					errs = append(errs, err)
				}
			}

			// Every method, succeeding.
			_, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0))
			check(err)
			check(s.Renew(ctx, id, "tok", t0.Add(time.Minute)))
			check(s.RenewBatch(ctx, []idem.Held{{ID: id, Token: "tok"}}, t0.Add(time.Minute), make([]bool, 1)))
			check(s.Complete(ctx, id, "tok", idem.Completion{Response: exchange.Response{Status: 201, Body: []byte(body)}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}))
			_, err = s.Get(ctx, id)
			check(err)
			// The completion inside the request's transaction.
			txID := idem.ID{Scope: scope, Key: key + "-tx"}
			tctx, done := WithTxSlot(ctx)
			_, _, err = s.Acquire(tctx, acquireAt(txID, "tok", t0))
			check(err)
			if _, err := Tx(tctx, db); err != nil {
				t.Fatal(err)
			}
			check(s.Complete(tctx, txID, "tok", idem.Completion{Response: exchange.Response{Status: 201, Body: []byte(body)}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}))
			done()
			if len(errs) > 0 {
				t.Fatalf("the lifecycle failed: %v", errs)
			}
			// The logger does print values: those of the user's statements.
			if err := db.Exec("SELECT ?", "probe-value").Error; err != nil || !strings.Contains(gormLog.String(), "probe-value") {
				t.Fatalf("the GORM logger did not print a statement's value (%v): the test proves nothing\n%s", err, gormLog.String())
			}

			// Every method, failing: the table is gone. On SQLite a key in
			// flight lives in memory: Renew, RenewBatch and Release never
			// reach the table, and Complete does for a key held, whose
			// record it writes.
			local := s.local != nil
			held := id
			if local {
				held = idem.ID{Scope: scope, Key: key + "-held"}
				_, _, err = s.Acquire(ctx, acquireAt(held, "tok", t0))
				check(err)
			}
			dropTable(t, db, s.sql.quotedTableName)
			_, _, err = s.Acquire(ctx, acquireAt(id, "tok2", t0.Add(2*time.Hour)))
			check(err)
			want := 4
			if !local {
				want = 7
				check(s.Renew(ctx, id, "tok", t0.Add(time.Minute)))
				check(s.RenewBatch(ctx, []idem.Held{{ID: id, Token: "tok"}}, t0.Add(time.Minute), make([]bool, 1)))
				check(s.Release(ctx, id, "tok"))
			}
			check(s.Complete(ctx, held, "tok", idem.Completion{Response: exchange.Response{Status: 201, Body: []byte(body)}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}))
			_, err = s.Get(ctx, id)
			check(err)
			_, err = s.Purge(ctx, t0.Add(48*time.Hour), 10)
			check(err)
			if len(errs) != want {
				t.Fatalf("%d of %d calls on a dropped table failed (%v): the test proves nothing", len(errs), want, errs)
			}
			for _, err := range errs {
				if errors.Is(err, idem.ErrNotFound) || errors.Is(err, idem.ErrLockLost) {
					t.Fatalf("a call on a dropped table returned %v, want a system error", err)
				}
			}

			for name, text := range map[string]string{
				"GORM's log":         gormLog.String(),
				"the store's log":    storeLog.String(),
				"the returned error": errors.Join(errs...).Error(),
			} {
				if strings.Contains(text, "secret") {
					t.Errorf("%s carries a key, scope or stored response:\n%s", name, text)
				}
			}
		})
	}
}

// TestKeysNeverLoggedByDefault: the same with GORM's default logger, as a
// user who passes no gorm.Config gets it, on a store error.
func TestKeysNeverLoggedByDefault(t *testing.T) {
	var out lockedBuffer
	db := openSQLite(t).Session(&gorm.Session{Logger: logger.New(log.New(&out, "", 0), logger.Config{
		SlowThreshold: 200 * time.Millisecond, LogLevel: logger.Warn, Colorful: true})})
	s := newStore(t, db)
	dropTable(t, db, s.sql.quotedTableName)
	if _, _, err := s.Acquire(context.Background(), acquireAt(idem.ID{Scope: "acct-secret", Key: "u-1-secret"}, "tok", t0)); err == nil {
		t.Fatal("Acquire on a dropped table succeeded")
	}
	if strings.Contains(out.String(), "secret") {
		t.Fatalf("GORM's default logger printed the key or scope:\n%s", out.String())
	}
}
