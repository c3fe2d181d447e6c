package gormstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// closeBound is how long the tests below give Close to return: far more
// than any call of theirs takes, so that only a Close that waits for
// traffic that never ends runs into it.
const closeBound = 30 * time.Second

// closeIn runs Close on a goroutine and returns its error, and whether it
// returned within closeBound.
func closeIn(s *Store) (err error, returned bool) {
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		return err, true
	case <-time.After(closeBound):
		return nil, false
	}
}

// TestCloseUnderTraffic: Close returns while eight clients keep acquiring
// keys (some of them giving up mid-call, which leaves Acquire's writes
// running detached on a database server), and from then on every call
// fails at once with ErrClosed; nothing panics (the race detector checks
// the store's bookkeeping too).
func TestCloseUnderTraffic(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := newStore(t, b.open(t))
			const clients = 8
			var (
				acquired atomic.Int64
				closing  atomic.Bool
				stop     atomic.Bool // the test failed: the clients leave
				wg       sync.WaitGroup
				mu       sync.Mutex
				other    []error // errors that are neither ErrClosed nor a client giving up
				after    = make([]int, clients)
			)
			for c := range clients {
				wg.Go(func() {
					for i := 0; !stop.Load(); i++ {
						ctx, cancel := context.WithCancel(context.Background())
						if i%5 == 4 {
							// A client that gives up mid-call.
							cancel()
							ctx, cancel = context.WithTimeout(context.Background(), time.Duration(i%7)*time.Millisecond)
						}
						id := idem.ID{Scope: fmt.Sprint("client-", c), Key: fmt.Sprint("k-", i%50)}
						_, _, err := s.Acquire(ctx, acquireAt(id, fmt.Sprint("tok-", c, "-", i), t0.Add(time.Duration(i)*time.Hour)))
						cancel()
						switch {
						case err == nil:
							acquired.Add(1)
						case errors.Is(err, ErrClosed):
							if !closing.Load() { // set before Close begins
								mu.Lock()
								other = append(other, fmt.Errorf("ErrClosed before Close: %w", err))
								mu.Unlock()
							}
							after[c]++
							if after[c] == 3 {
								return // refused three times: the store stays closed
							}
						case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
						default:
							mu.Lock()
							other = append(other, err)
							mu.Unlock()
							return
						}
					}
				})
			}
			for deadline := time.Now().Add(closeBound); acquired.Load() < 200; {
				if time.Now().After(deadline) {
					stop.Store(true)
					wg.Wait()
					t.Fatalf("%d acquisitions in %v; errors: %v", acquired.Load(), closeBound, other)
				}
				time.Sleep(time.Millisecond)
			}
			closing.Store(true)
			err, returned := closeIn(s)
			n := acquired.Load()
			if !returned {
				stop.Store(true)
				wg.Wait()
				t.Fatalf("Close did not return within %v while %d clients kept acquiring (%d acquisitions)",
					closeBound, clients, acquired.Load())
			}
			if err != nil {
				t.Fatalf("Close: %v", err)
			}
			left := make(chan struct{})
			go func() { wg.Wait(); close(left) }()
			select {
			case <-left:
			case <-time.After(closeBound):
				stop.Store(true)
				wg.Wait()
				t.Fatalf("calls still succeed %v after Close returned: %d acquisitions since",
					closeBound, acquired.Load()-n)
			}
			if len(other) > 0 {
				t.Fatalf("%d unexpected errors, the first: %v", len(other), other[0])
			}
			// A client's call that was under way when Close began may
			// finish; none begun after Close returned does.
			if late := acquired.Load() - n; late > clients {
				t.Fatalf("%d acquisitions succeeded after Close returned", late)
			}
			ctx := testCtx(t)
			id := idem.ID{Key: "after-close"}
			for name, err := range map[string]error{
				"Get":     func() error { _, err := s.Get(ctx, id); return err }(),
				"Renew":   s.Renew(ctx, id, "tok", t0),
				"Release": s.Release(ctx, id, "tok"),
				"Complete": s.Complete(ctx, id, "tok", idem.Completion{Response: exchange.Response{Status: 200},
					CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)}),
				"RenewBatch": s.RenewBatch(ctx, []idem.Held{{ID: id, Token: "tok"}}, t0, make([]bool, 1)),
				"Purge":      func() error { _, err := s.Purge(ctx, t0, 10); return err }(),
			} {
				if !errors.Is(err, ErrClosed) {
					t.Errorf("%s after Close: %v, want ErrClosed", name, err)
				}
			}
			// A handler's transaction that Complete would have committed is
			// rolled back, and the error says so.
			txCtx, done := WithTxSlot(ctx)
			defer done()
			slotFrom(txCtx).arm("tok", nil)
			tx, err := Tx(txCtx, b.open(t))
			if err != nil {
				t.Fatal(err)
			}
			err = s.Complete(txCtx, id, "tok", idem.Completion{Response: exchange.Response{Status: 200},
				CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)})
			if !errors.Is(err, ErrClosed) || !errors.Is(err, idem.ErrRolledBack) {
				t.Errorf("Complete in a transaction after Close: %v, want ErrClosed and idem.ErrRolledBack", err)
			}
			if err := tx.Commit().Error; err == nil {
				t.Error("the request's transaction was still open after Complete refused it")
			}
			if err := s.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
		})
	}
}

// TestCloseWaitsForCallsInProgress: a call under way when Close begins is
// waited for and completes; a call begun meanwhile is refused with
// ErrClosed; and a call that does not end is waited for only up to the
// store's close timeout, after which Close says how many still run.
func TestCloseWaitsForCallsInProgress(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			s := newStore(t, b.open(t), WithCloseTimeout(closeBound/3))
			var (
				entered = make(chan struct{}, 1)
				release = make(chan struct{})
			)
			s.onStatement = func(ctx context.Context, query string) func(int64, error) {
				if ctx.Value(holdKey{}) != nil {
					entered <- struct{}{}
					<-release
				}
				return nil
			}
			ctx := testCtx(t)
			id := idem.ID{Key: "held"}
			if _, _, err := s.Acquire(ctx, acquireAt(id, "tok", t0)); err != nil {
				t.Fatal(err)
			}
			completed := make(chan error, 1)
			go func() {
				completed <- s.Complete(context.WithValue(ctx, holdKey{}, true), id, "tok",
					idem.Completion{Response: exchange.Response{Status: 201}, CompletedAt: t0, ExpiresAt: t0.Add(time.Hour)})
			}()
			<-entered
			closed := make(chan error, 1)
			go func() { closed <- s.Close() }()
			// Close has begun once calls are refused.
			for deadline := time.Now().Add(closeBound); ; {
				_, err := s.Get(ctx, id)
				if errors.Is(err, ErrClosed) {
					break
				}
				if err != nil || time.Now().After(deadline) {
					close(release)
					t.Fatalf("Get while Close waits: %v, want ErrClosed", err)
				}
				time.Sleep(time.Millisecond)
			}
			select {
			case err := <-closed:
				t.Fatalf("Close returned (%v) while a Complete was under way", err)
			default:
			}
			close(release)
			if err := <-completed; err != nil {
				t.Fatalf("the Complete under way when Close began: %v", err)
			}
			select {
			case err := <-closed:
				if err != nil {
					t.Fatalf("Close: %v", err)
				}
			case <-time.After(closeBound):
				t.Fatalf("Close did not return within %v of the last call's end", closeBound)
			}

			// A call that never ends: Close gives up on it after the bound.
			s2 := newStore(t, b.open(t), WithCloseTimeout(50*time.Millisecond))
			stuck := make(chan struct{})
			s2.onStatement = func(ctx context.Context, query string) func(int64, error) {
				if ctx.Value(holdKey{}) != nil {
					entered <- struct{}{}
					<-stuck
				}
				return nil
			}
			getDone := make(chan struct{})
			go func() {
				defer close(getDone)
				_, _ = s2.Get(context.WithValue(ctx, holdKey{}, true), id)
			}()
			<-entered
			err, returned := closeIn(s2)
			close(stuck)
			<-getDone
			if !returned {
				t.Fatalf("Close did not return within %v while a call did not end", closeBound)
			}
			if err == nil || !strings.Contains(err.Error(), "1 call") {
				t.Fatalf("Close with a call that does not end: %v, want an error counting it", err)
			}
		})
	}
}

type holdKey struct{}
