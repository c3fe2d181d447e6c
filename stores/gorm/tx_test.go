package gormstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/idemtest"
	"gorm.io/gorm"
)

// The business side of the transaction tests: a charges table, and a
// handler that writes one charge per request through the request's
// transaction. The key is the charge's primary key, so a second execution
// could not even insert its row.

func createCharges(tb testing.TB, db *gorm.DB) string {
	tb.Helper()
	name := uniqueTable("charges")
	if err := db.Exec("CREATE TABLE " + name + " (charge_key VARCHAR(255) PRIMARY KEY, amount INTEGER NOT NULL)").Error; err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { dropTable(tb, db, name) })
	return name
}

func countCharges(tb testing.TB, db *gorm.DB, charges string) int {
	tb.Helper()
	var n int
	if err := db.Raw("SELECT COUNT(*) FROM " + charges).Scan(&n).Error; err != nil {
		tb.Fatal(err)
	}
	return n
}

// hooks let a test act around the handler's business write.
type hooks struct {
	// before runs before the handler begins its transaction.
	before func(r *http.Request)
	// after runs after the business write; it may panic or block, and
	// returns the status to answer.
	after func(r *http.Request) int
}

// chargeHandler inserts a charge in the request's transaction and answers
// 201 (or what h.after says).
func chargeHandler(db *gorm.DB, charges string, runs *atomic.Int32, h hooks) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs != nil {
			runs.Add(1)
		}
		if h.before != nil {
			h.before(r)
		}
		var req struct{ Amount int }
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tx, err := Tx(r.Context(), db)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		key := r.Header.Get("Idempotency-Key")
		if err := tx.Exec("INSERT INTO "+charges+" (charge_key, amount) VALUES (?, ?)", key, req.Amount).Error; err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		status := http.StatusCreated
		if h.after != nil {
			status = h.after(r)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"charge":%q,"amount":%d}`, key, req.Amount)
	})
}

// serve mounts h behind TxMiddleware and the idempotency middleware.
func serve(tb testing.TB, e *idem.Engine, h http.Handler) string {
	srv := httptest.NewUnstartedServer(TxMiddleware(idemhttp.Middleware(e)(h)))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // panics are part of the tests
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv.URL
}

type reply struct {
	status   int
	replayed bool
	body     string
}

func post(tb testing.TB, client *http.Client, url, key string) (reply, error) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/charges", strings.NewReader(`{"amount":1999}`))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header.Get(exchange.ReplayedHeader) == "true", string(body)}, err
}

func mustPost(tb testing.TB, url, key string) reply {
	tb.Helper()
	r, err := post(tb, http.DefaultClient, url, key)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

var discardLogger = slog.New(slog.DiscardHandler)

// quietEngine is an Engine on s whose time is now's (nil: the system's).
func quietEngine(s idem.Store, now func() time.Time) *idem.Engine {
	var clock idem.Clock
	if now != nil {
		clock = idemtest.ClockOf(now)
	}
	return idem.New(idem.Config{Store: s, Clock: clock, Logger: discardLogger, Lease: time.Minute})
}

// TestTransactionalCompletion: the handler's writes commit if and only if
// its response is recorded.
// withheld: the client must get no response at all.
const withheld = -1

func TestTransactionalCompletion(t *testing.T) {
	cases := []struct {
		name        string
		hooks       func(t *testing.T, s *Store) hooks
		wantStatus  int
		wantCharges int
		wantState   idem.State // 0: no record
		// leased: the Engine takes leases, so that another request can
		// take the key over (a leaseless Engine, as on SQLite, never lets
		// one).
		leased bool
	}{
		{"stored 201 commits", nil, http.StatusCreated, 1, idem.Completed, false},
		{"stored 4xx commits", func(*testing.T, *Store) hooks {
			return hooks{after: func(*http.Request) int { return http.StatusUnprocessableEntity }}
		}, http.StatusUnprocessableEntity, 1, idem.Completed, false},
		{"5xx rolls back", func(*testing.T, *Store) hooks {
			return hooks{after: func(*http.Request) int { return http.StatusServiceUnavailable }}
		}, http.StatusServiceUnavailable, 0, 0, false},
		{"panic rolls back", func(*testing.T, *Store) hooks {
			return hooks{after: func(*http.Request) int { panic("handler crashed after its write") }}
		}, 0, 0, 0, false},
		{"lock lost rolls back", func(t *testing.T, s *Store) hooks {
			// Another instance takes the key over while this handler runs
			// (its lease lapsed): this handler's charge must not land. The
			// takeover comes before the handler's transaction begins, as
			// SQLite's single writer would otherwise wait for it.
			return hooks{before: func(r *http.Request) {
				ctx := context.Background()
				id := idem.ID{Key: r.Header.Get("Idempotency-Key")}
				rec, err := s.Get(ctx, id)
				if err != nil {
					t.Error(err)
				}
				later := time.Now().Add(2 * time.Minute)
				_, o, err := s.Acquire(ctx, idem.Acquire{ID: id, Fingerprint: rec.Fingerprint, Token: "successor",
					Now: later, LeaseUntil: later.Add(time.Minute), ExpiresAt: later.Add(time.Hour)})
				if err != nil || o != idem.AcquireTookOver {
					t.Errorf("takeover = %v, %v", o, err)
				}
			}}
		}, withheld, 0, idem.InFlight, true},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					db := b.open(t)
					s := newStore(t, db)
					charges := createCharges(t, db)
					var h hooks
					if c.hooks != nil {
						h = c.hooks(t, s)
					}
					var store idem.Store = s
					if c.leased {
						store = withLeases{s}
					}
					url := serve(t, quietEngine(store, nil), chargeHandler(db, charges, nil, h))
					r, err := post(t, http.DefaultClient, url, "key-1")
					switch {
					case c.wantStatus == withheld:
						// The handler's 201 describes a charge that was rolled
						// back: the client gets a broken connection instead.
						if err == nil {
							t.Fatalf("POST = %d, want the response withheld: its charge was rolled back", r.status)
						}
					case c.wantStatus == 0:
						if err == nil && r.status < 500 {
							t.Fatalf("a panicking handler answered %d", r.status)
						}
					case err != nil || r.status != c.wantStatus:
						t.Fatalf("POST = %d (%v), want %d", r.status, err, c.wantStatus)
					}
					if n := countCharges(t, db, charges); n != c.wantCharges {
						t.Errorf("%d charges committed, want %d", n, c.wantCharges)
					}
					rec, err := s.Get(testCtx(t), idem.ID{Key: "key-1"})
					switch {
					case c.wantState == 0 && !errors.Is(err, idem.ErrNotFound):
						t.Errorf("record %v (%v), want none", rec.State, err)
					case c.wantState != 0 && (err != nil || rec.State != c.wantState):
						t.Errorf("record %v (%v), want %v", rec.State, err, c.wantState)
					}
				})
			}
		})
	}
}

// withLeases is the store as an Engine that takes leases on it sees it:
// on SQLite, whose Engine takes none, a takeover can then be staged.
type withLeases struct{ *Store }

func (withLeases) OneProcess() bool { return false }

// TestTxSlot drives the slot the way the Engine does, without HTTP, and
// checks that the store itself ends the transaction: committed by
// Complete, rolled back by Release, before the request's cleanup runs.
func TestTxSlot(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db := b.open(t)
			s := newStore(t, db)
			charges := createCharges(t, db)
			for i, c := range []struct {
				name        string
				end         func(ctx context.Context, id idem.ID) error
				wantCharges int
			}{
				{"Complete commits", func(ctx context.Context, id idem.ID) error {
					return s.Complete(ctx, id, "tok", idem.Completion{Response: exchange.Response{Status: 201}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)})
				}, 1},
				{"Release rolls back", func(ctx context.Context, id idem.ID) error {
					// and says so: the handler's writes are undone.
					if err := s.Release(ctx, id, "tok"); !errors.Is(err, idem.ErrRolledBack) || errors.Is(err, idem.ErrLockLost) {
						return fmt.Errorf("Release: %w, want ErrRolledBack alone", err)
					}
					return nil
				}, 0},
			} {
				t.Run(c.name, func(t *testing.T) {
					ctx, done := WithTxSlot(testCtx(t))
					defer done()
					if _, err := Tx(ctx, db); !errors.Is(err, ErrNotGuarded) {
						t.Fatalf("Tx before Acquire: %v, want ErrNotGuarded", err)
					}
					id := idem.ID{Key: fmt.Sprint("k", i)}
					if _, o, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil || o != idem.AcquireCreated {
						t.Fatalf("Acquire = %v, %v", o, err)
					}
					tx, err := Tx(ctx, db)
					if err != nil {
						t.Fatal(err)
					}
					if again, err := Tx(ctx, db); err != nil || again != tx {
						t.Fatalf("second Tx = %p, %v; want the same transaction %p", again, err, tx)
					}
					if err := tx.Exec("INSERT INTO "+charges+" (charge_key, amount) VALUES (?, 1)", id.Key).Error; err != nil {
						t.Fatal(err)
					}
					before := countCharges(t, db, charges)
					if err := c.end(context.WithoutCancel(ctx), id); err != nil {
						t.Fatal(err)
					}
					if err := tx.Commit().Error; err == nil {
						t.Fatal("the transaction was still open after the store ended the request")
					}
					if n := countCharges(t, db, charges) - before; n != c.wantCharges {
						t.Fatalf("%d charges landed, want %d", n, c.wantCharges)
					}
					if _, err := Tx(ctx, db); !errors.Is(err, ErrTxDone) {
						t.Fatalf("Tx after the end: %v, want ErrTxDone", err)
					}
				})
			}
		})
	}
}

func TestTxErrors(t *testing.T) {
	db := openSQLite(t)
	s := newStore(t, db)
	charges := createCharges(t, db)
	if _, err := Tx(context.Background(), db); !errors.Is(err, ErrNoTxSlot) {
		t.Fatalf("Tx without a slot: %v, want ErrNoTxSlot", err)
	}

	// A transaction that nothing ended is rolled back by the cleanup.
	ctx, done := WithTxSlot(testCtx(t))
	if _, _, err := s.Acquire(ctx, acquireAt(idem.ID{Key: "k"}, "tok", t0)); err != nil {
		t.Fatal(err)
	}
	tx, err := Tx(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Exec("INSERT INTO " + charges + " (charge_key, amount) VALUES ('k', 1)").Error; err != nil {
		t.Fatal(err)
	}
	done()
	done() // twice is fine
	if n := countCharges(t, db, charges); n != 0 {
		t.Fatalf("%d charges after the cleanup, want 0", n)
	}
	if _, err := Tx(ctx, db); !errors.Is(err, ErrTxDone) {
		t.Fatalf("Tx after the cleanup: %v, want ErrTxDone", err)
	}
	// The record is the Engine's to end, not the cleanup's.
	if rec, err := s.Get(ctx, idem.ID{Key: "k"}); err != nil || rec.State != idem.InFlight {
		t.Fatalf("record after the cleanup: %v, %v", rec.State, err)
	}
	// Its writes are gone, so its response must not be recorded as if they
	// had happened: Complete refuses, and the record stays in flight for
	// the Engine to release.
	err = s.Complete(ctx, idem.ID{Key: "k"}, "tok", idem.Completion{Response: exchange.Response{Status: 200}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)})
	if !errors.Is(err, ErrTxAborted) || !errors.Is(err, idem.ErrRolledBack) {
		t.Fatalf("Complete after the cleanup rolled back the handler's writes: %v, want ErrTxAborted (an idem.ErrRolledBack)", err)
	}
	if rec, err := s.Get(ctx, idem.ID{Key: "k"}); err != nil || rec.State != idem.InFlight {
		t.Fatalf("record after the refused Complete: %v, %v", rec.State, err)
	}
	// Release frees the record, and says the handler's writes are undone.
	if err := s.Release(ctx, idem.ID{Key: "k"}, "tok"); !errors.Is(err, idem.ErrRolledBack) || errors.Is(err, idem.ErrLockLost) {
		t.Fatalf("Release after the refused Complete: %v, want ErrRolledBack alone", err)
	}
	if _, err := s.Get(ctx, idem.ID{Key: "k"}); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("record after the Release: %v, want none", err)
	}
	// A slot only serves the lock it was armed for: another lock completes
	// without a transaction.
	ctx2, done2 := WithTxSlot(testCtx(t))
	defer done2()
	if _, _, err := s.Acquire(ctx2, acquireAt(idem.ID{Key: "k2"}, "tok2", t0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx2, idem.ID{Key: "k2"}, "other-token", idem.Completion{Response: exchange.Response{Status: 200}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}); !errors.Is(err, idem.ErrLockLost) || errors.Is(err, idem.ErrRolledBack) {
		t.Fatalf("Complete with another token: %v, want ErrLockLost, and nothing rolled back", err)
	}
	// A completion that fails inside the request's transaction takes the
	// handler's writes with it, and says so: the adapter must withhold the
	// response.
	ctx3, done3 := WithTxSlot(testCtx(t))
	defer done3()
	if _, _, err := s.Acquire(ctx3, acquireAt(idem.ID{Key: "k3"}, "tok3", t0)); err != nil {
		t.Fatal(err)
	}
	if _, err := Tx(ctx3, s.db); err != nil {
		t.Fatal(err)
	}
	err = s.Complete(ctx3, idem.ID{Key: "k3-gone"}, "tok3", idem.Completion{Response: exchange.Response{Status: 201}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)})
	if !errors.Is(err, idem.ErrRolledBack) || !errors.Is(err, idem.ErrLockLost) {
		t.Fatalf("Complete in the transaction of a lock no longer held: %v, want ErrRolledBack and ErrLockLost", err)
	}
}

// TestTxPassThrough: requests idemkit lets through hold no lock, so Tx
// refuses them rather than begin a transaction nobody would commit.
func TestTxPassThrough(t *testing.T) {
	db := openSQLite(t)
	s := newStore(t, db)
	e := idem.New(idem.Config{Store: s, KeyOptional: true, Logger: discardLogger})
	var got error
	url := serve(t, e, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, got = Tx(r.Context(), db)
	}))
	resp, err := http.Post(url, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !errors.Is(got, ErrNotGuarded) {
		t.Fatalf("Tx on a request without a key (KeyOptional): %v, want ErrNotGuarded", got)
	}
}

// TestTxAbortedBeforeComplete: when the slot's cleanup rolls the handler's
// transaction back before the response is recorded (the request was cut
// off, say by a timeout handler), the response must not be stored as if
// the rolled-back writes had happened: the key is released and a retry
// runs the handler again.
func TestTxAbortedBeforeComplete(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db := b.open(t)
			s := newStore(t, db)
			charges := createCharges(t, db)
			e := quietEngine(s, time.Now)
			req := func() *exchange.Request {
				return &exchange.Request{Method: http.MethodPost, Path: "/charges", KeyLines: []string{`"aborted"`}, Body: []byte(`{}`)}
			}
			ctx, done := WithTxSlot(testCtx(t))
			d := e.Adapter().Begin(ctx, *req())
			if d.Action != exchange.Run {
				t.Fatalf("first request: %+v", d)
			}
			tx, err := Tx(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Exec("INSERT INTO " + charges + " (charge_key, amount) VALUES ('aborted', 1)").Error; err != nil {
				t.Fatal(err)
			}
			done() // the request is over before its response is recorded
			d.Lock.Write([]byte(`{"charged":true}`))
			if f := d.Lock.Finish(ctx, 201, nil); f.Outcome != exchange.RolledBack || !f.Withhold() || !errors.Is(f.Err, ErrTxAborted) {
				t.Fatalf("Finish = %+v, want it rolled back with ErrTxAborted, and withheld", f)
			}
			if n := countCharges(t, db, charges); n != 0 {
				t.Fatalf("%d charges after the rollback", n)
			}
			if d := e.Adapter().Begin(testCtx(t), *req()); d.Action != exchange.Run {
				t.Fatalf("retry: %+v, want the handler to run again (no false replay)", d)
			} else {
				d.Lock.Abandon(testCtx(t), exchange.ReasonPanic)
			}
		})
	}
}

// Defect: a response the policy does not record (here, one over
// MaxResponseBody) released the key and rolled back the handler's
// transaction without saying so, so every entry point reported success for
// work that was undone. Finish now reports it rolled back, and withheld.
func TestTxReleasedIsUndone(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db := b.open(t)
			s := newStore(t, db)
			charges := createCharges(t, db)
			e := idem.New(idem.Config{Store: s, Logger: discardLogger, MaxResponseBody: 16})
			ctx, done := WithTxSlot(testCtx(t))
			defer done()
			d := e.Adapter().Begin(ctx, exchange.Request{Method: http.MethodPost, Path: "/charges", KeyLines: []string{`"big"`}, Body: []byte(`{}`)})
			if d.Action != exchange.Run {
				t.Fatalf("first request: %+v", d)
			}
			tx, err := Tx(d.Lock.Context(), db)
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Exec("INSERT INTO " + charges + " (charge_key, amount) VALUES ('big', 1)").Error; err != nil {
				t.Fatal(err)
			}
			d.Lock.Write([]byte(`{"charged":true,"receipt":"a receipt longer than the limit"}`))
			if f := d.Lock.Finish(ctx, 201, nil); f.Outcome != exchange.RolledBack || f.Reason != exchange.ReasonTooLarge || !f.Withhold() {
				t.Fatalf("Finish = %+v, want it rolled back (too large) and withheld", f)
			}
			if n := countCharges(t, db, charges); n != 0 {
				t.Fatalf("%d charges after the rollback", n)
			}
			// A 5xx rolls back too, and goes out as it is: it reports no success.
			ctx2, done2 := WithTxSlot(testCtx(t))
			defer done2()
			d = e.Adapter().Begin(ctx2, exchange.Request{Method: http.MethodPost, Path: "/charges", KeyLines: []string{`"fails"`}, Body: []byte(`{}`)})
			if _, err := Tx(d.Lock.Context(), db); err != nil {
				t.Fatal(err)
			}
			if f := d.Lock.Finish(ctx2, 503, nil); f.Outcome != exchange.RolledBack || f.Withhold() {
				t.Fatalf("Finish of a 503 = %+v, want it rolled back, not withheld", f)
			}
			// Without a transaction, a release is no rollback.
			d = e.Adapter().Begin(testCtx(t), exchange.Request{Method: http.MethodPost, Path: "/charges", KeyLines: []string{`"plain"`}, Body: []byte(`{}`)})
			d.Lock.Write([]byte(`{"charged":true,"receipt":"a receipt longer than the limit"}`))
			if f := d.Lock.Finish(testCtx(t), 201, nil); f.Outcome != exchange.NotRecorded || f.Withhold() {
				t.Fatalf("Finish without a transaction = %+v, want it not recorded, not withheld", f)
			}
		})
	}
}

// Defect: with the slot installed after the idempotency middleware, Tx said
// "the request holds no idempotency lock", which sent users looking in the
// wrong place: it now says that the order is wrong.
func TestTxSlotAfterMiddleware(t *testing.T) {
	db := openSQLite(t)
	s := newStore(t, db)
	e := idem.New(idem.Config{Store: s, Logger: discardLogger})
	d := e.Adapter().Begin(testCtx(t), exchange.Request{Method: http.MethodPost, Path: "/v1/charges", KeyLines: []string{`"k"`}, Body: []byte(`{}`)})
	if d.Lock == nil {
		t.Fatalf("Begin: %+v, want a lock", d)
	}
	defer d.Lock.Abandon(testCtx(t), exchange.ReasonPanic)
	ctx, done := WithTxSlot(d.Lock.Context()) // the slot after idemkit: the store never armed it
	defer done()
	_, err := Tx(ctx, db)
	if !errors.Is(err, ErrSlotAfterMiddleware) || !errors.Is(err, ErrNotGuarded) || !strings.Contains(err.Error(), "before") {
		t.Fatalf("Tx with the slot after the middleware: %v, want ErrSlotAfterMiddleware saying to register it before", err)
	}
}

// The request's transaction is one to GORM: savepoints and a nested
// Transaction roll back their part alone, on every database.
func TestTxSavepoints(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db := b.open(t)
			s := newStore(t, db)
			charges := createCharges(t, db)
			ctx, done := WithTxSlot(testCtx(t))
			defer done()
			id := idem.ID{Key: "nested"}
			if _, o, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil || o != idem.AcquireCreated {
				t.Fatalf("Acquire = %v, %v", o, err)
			}
			tx, err := Tx(ctx, db)
			if err != nil {
				t.Fatal(err)
			}
			insert := func(tx *gorm.DB, key string) error {
				return tx.Exec("INSERT INTO "+charges+" (charge_key, amount) VALUES (?, 1)", key).Error
			}
			if err := insert(tx, "kept"); err != nil {
				t.Fatal(err)
			}
			if err := tx.SavePoint("sp_before").Error; err != nil {
				t.Fatal(err)
			}
			if err := insert(tx, "undone"); err != nil {
				t.Fatal(err)
			}
			if err := tx.RollbackTo("sp_before").Error; err != nil {
				t.Fatal(err)
			}
			inner := errors.New("inner failed")
			if err := tx.Transaction(func(tx2 *gorm.DB) error {
				if err := insert(tx2, "inner"); err != nil {
					return err
				}
				return inner
			}); !errors.Is(err, inner) {
				t.Fatalf("nested Transaction: %v", err)
			}
			if err := s.Complete(ctx, id, "tok", idem.Completion{Response: exchange.Response{Status: 201},
				CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			var keys []string
			if err := db.Raw("SELECT charge_key FROM " + charges).Scan(&keys).Error; err != nil {
				t.Fatal(err)
			}
			if len(keys) != 1 || keys[0] != "kept" {
				t.Fatalf("charges %q committed, want only the one outside the rolled-back savepoints", keys)
			}
		})
	}
}
