package gormstore

import (
	"context"
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
func (sl *txSlot) arm(token string) {
	sl.mu.Lock()
	if sl.tx == nil && !sl.ended {
		sl.token = token
	}
	sl.mu.Unlock()
}

// takeTx hands the transaction begun for the lock held by token to the
// store, which ends it, and closes the slot. It returns nil if ctx has no
// slot, the slot serves another lock, or no transaction was begun; and
// ErrTxAborted if the slot's cleanup already rolled that transaction back.
func takeTx(ctx context.Context, token string) (*gorm.DB, error) {
	sl := slotFrom(ctx)
	if sl == nil {
		return nil, nil
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.token != token {
		return nil, nil
	}
	if sl.aborted {
		return nil, ErrTxAborted
	}
	if sl.ended {
		return nil, nil
	}
	tx := sl.tx
	sl.tx, sl.ended = nil, true
	return tx, nil
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
		sl.tx, sl.ended = nil, true
		sl.aborted = sl.aborted || tx != nil
		sl.mu.Unlock()
		if tx != nil {
			tx.Rollback()
		}
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
// Tx returns ErrNoTxSlot, ErrNotGuarded or ErrTxDone when there is no
// transaction to give, and the error of BEGIN if it fails.
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
	tx := db.WithContext(context.WithoutCancel(ctx)).Begin()
	if tx.Error != nil {
		return nil, tx.Error
	}
	sl.tx = tx
	return tx, nil
}
