package gormstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"sync"

	idem "github.com/idemkit/idemkit/core"
	"gorm.io/gorm"
)

// Errors of Tx.
var (
	// ErrNoTxSlot: the context carries no transaction slot; install one with
	// WithTxSlot (or TxMiddleware) before the idempotency middleware.
	ErrNoTxSlot = errors.New("gormstore: no transaction slot in the request context")
	// ErrNotGuarded: the request holds no idempotency lock, so no stored
	// response will commit a transaction for it. Either idemkit let it pass
	// (unguarded method, optional key absent, store down with FailOpen), or
	// the slot was installed after the idempotency middleware. Use a plain
	// transaction for such requests.
	ErrNotGuarded = errors.New("gormstore: the request holds no idempotency lock")
	// ErrSlotAfterMiddleware: the request holds an idempotency lock, but its
	// transaction slot was installed after the idempotency middleware, so
	// the store never saw it. Register WithTxSlot (or TxMiddleware) before
	// idemkit's middleware. It wraps ErrNotGuarded.
	ErrSlotAfterMiddleware = fmt.Errorf("gormstore: the transaction slot was installed after the idempotency middleware; "+
		"register WithTxSlot or TxMiddleware before it: %w", ErrNotGuarded)
	// ErrTxDone: the request's transaction was already committed or rolled
	// back (Tx called after the response was recorded).
	ErrTxDone = errors.New("gormstore: the request's transaction has ended")
	// ErrTxAborted: Complete found the request's transaction rolled back by
	// the slot's cleanup (the request ended before its response was
	// recorded, e.g. under a timeout handler). Nothing is stored, the key is
	// released, and a retry runs the handler again.
	// It wraps idem.ErrRolledBack.
	ErrTxAborted = fmt.Errorf("gormstore: the request's transaction was rolled back before its response was recorded: %w", idem.ErrRolledBack)
)

// txSlot is one request's place for its business transaction. It lives in
// the request context as a pointer, so that the store, which sees the
// context the idempotency middleware got, and the handler, which may only
// read that context, share it.
type txSlot struct {
	mu    sync.Mutex
	token string   // the idempotency lock the request holds; set by Acquire
	tx    *gorm.DB // begun by Tx, ended by Complete, Release or the cleanup
	ended bool
	// turn is, on SQLite, the write turn of the store's file (see
	// sqliteFile.turn), set by Acquire with token: Tx takes it before
	// BEGIN, and whoever ends tx lets it go after the COMMIT or ROLLBACK.
	// Requests' transactions then queue for SQLite's write lock in Go,
	// handed on as soon as the last one commits, instead of sleeping in
	// SQLite's busy handler (1, 2, 5, 10 ms ...) while nobody holds it.
	turn chan struct{}
	// holds: tx holds turn.
	holds bool
	// aborted: the cleanup rolled back a transaction the handler had begun
	// before the response was recorded. Its writes are gone, so the
	// response must not be stored as if they had happened.
	aborted bool
}

type slotKey struct{}

func slotFrom(ctx context.Context) *txSlot {
	sl, _ := ctx.Value(slotKey{}).(*txSlot)
	return sl
}

// arm records which lock the request holds: Complete and Release with this
// token end the transaction.
func (sl *txSlot) arm(token string, turn chan struct{}) {
	sl.mu.Lock()
	if sl.tx == nil && !sl.ended {
		sl.token, sl.turn = token, turn
	}
	sl.mu.Unlock()
}

// leave lets turn go if a transaction held it (see takeTx).
func leave(turn chan struct{}) {
	if turn != nil {
		<-turn
	}
}

// takeTx hands the transaction begun for the lock held by token to the
// store, which ends it, and closes the slot. It returns nil if ctx has no
// slot, the slot serves another lock, or no transaction was begun; and
// ErrTxAborted if the slot's cleanup already rolled that transaction back.
// turn is the write turn the transaction holds (nil if none): the caller
// lets it go (leave) once it has ended the transaction.
func takeTx(ctx context.Context, token string) (tx *gorm.DB, turn chan struct{}, err error) {
	sl := slotFrom(ctx)
	if sl == nil {
		return nil, nil, nil
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.token != token {
		return nil, nil, nil
	}
	if sl.aborted {
		return nil, nil, ErrTxAborted
	}
	if sl.ended {
		return nil, nil, nil
	}
	tx = sl.tx
	if sl.holds {
		turn = sl.turn
	}
	sl.tx, sl.ended, sl.holds = nil, true, false
	return tx, turn, nil
}

// WithTxSlot returns a copy of ctx carrying an empty transaction slot, and a
// function to call when the request is over: it rolls back a transaction
// that nothing ended (a handler that outlived its request, say) and is safe
// to call more than once. Install the slot before the idempotency middleware
// runs, on the context the adapter hands to the Engine:
//
//	net/http  r = r.WithContext(ctx)               (or use TxMiddleware)
//	Gin       c.Request = c.Request.WithContext(ctx)
//	Echo      c.SetRequest(c.Request().WithContext(ctx))
//	Fiber     c.SetUserContext(ctx)
func WithTxSlot(ctx context.Context) (context.Context, func()) {
	sl := new(txSlot)
	return context.WithValue(ctx, slotKey{}, sl), func() {
		sl.mu.Lock()
		tx := sl.tx
		var turn chan struct{}
		if sl.holds {
			turn = sl.turn
		}
		sl.tx, sl.ended, sl.holds = nil, true, false
		sl.aborted = sl.aborted || tx != nil
		sl.mu.Unlock()
		if tx != nil {
			tx.Rollback()
		}
		leave(turn)
	}
}

// TxMiddleware is net/http middleware installing a transaction slot (see
// WithTxSlot). Mount it outside the idempotency middleware:
//
//	handler := gormstore.TxMiddleware(idemhttp.Middleware(engine)(mux))
func TxMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, done := WithTxSlot(r.Context())
		defer done()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// Tx returns the request's business transaction, beginning it on db at the
// first call; later calls return the same transaction. db must reach the
// database holding the store's table.
//
// The handler writes through it and neither commits nor rolls it back: the
// store does. When the Engine records the response (Store.Complete), the
// record's completion is written in this transaction, which is then
// committed: the business writes and the stored response become durable
// together. When the Engine releases the key instead (a 5xx or another
// response that is not stored, a panic, a streamed or oversized response,
// or the lock lost to another request), the transaction is rolled back. A
// crash before the commit leaves neither, and the retry that follows the
// lease runs the handler again. A stored 4xx commits too: undo writes that
// must not stay with SavePoint and RollbackTo, or validate before writing.
//
// The transaction is not cancelled with the request, like the completion
// that commits it. Run the handler's statements in it as they are: a write
// that has begun is best finished and committed with the stored response,
// for the client's retry to find. Passing the request's context per
// statement (tx.WithContext(ctx)) lets a client that went away stop a
// query, but on SQLite the driver may deliver that interrupt late, to the
// next statement on the connection, which can be the completion: it then
// fails after the handler's response was written, and that response
// describes work that was rolled back.
//
// On SQLite, which has one writer, the requests' transactions take turns
// with each other and with the store's own writes, in Go: Tx waits for the
// turn before its BEGIN (no longer than ctx lasts, nor than SQLite's busy
// timeout, 10 s, if ctx sets no deadline), and the turn passes on when the
// transaction commits or rolls back. A handler holding the turn must not
// wait for another request's transaction.
//
// Tx returns ErrNoTxSlot, ErrNotGuarded or ErrTxDone when there is no
// transaction to give, and the error of BEGIN (or of the wait for the
// turn) if it fails.
func Tx(ctx context.Context, db *gorm.DB) (*gorm.DB, error) {
	sl := slotFrom(ctx)
	if sl == nil {
		return nil, ErrNoTxSlot
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	switch {
	case sl.ended:
		return nil, ErrTxDone
	case sl.token == "":
		if _, held := idem.HeldKey(ctx); held {
			return nil, ErrSlotAfterMiddleware
		}
		return nil, ErrNotGuarded
	case sl.tx != nil:
		return sl.tx, nil
	}
	if sl.turn != nil {
		if err := takeTurn(ctx, sl.turn); err != nil {
			return nil, fmt.Errorf("gormstore: begin the request's transaction: %w", err)
		}
	}
	var tx *gorm.DB
	// On a plain pool Tx begins the transaction itself; GORM does, with
	// its DefaultTransactionTimeout, on anything else.
	pool, ok := db.Statement.ConnPool.(*sql.DB)
	if ok && db.DefaultTransactionTimeout == 0 {
		// As GORM's Begin does, with one session where it makes two.
		bg := context.WithoutCancel(ctx)
		sqlTx, err := pool.BeginTx(bg, nil)
		if err != nil {
			if sl.turn != nil {
				leave(sl.turn)
			}
			return nil, err
		}
		tx = db.WithContext(bg)
		tx.Statement.ConnPool = sqlTx
	} else if tx = db.WithContext(context.WithoutCancel(ctx)).Begin(); tx.Error != nil {
		if sl.turn != nil {
			leave(sl.turn)
		}
		return nil, tx.Error
	}
	sl.tx, sl.holds = tx, sl.turn != nil
	return tx, nil
}
