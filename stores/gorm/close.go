package gormstore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by every call of a Store that Close has begun to
// close.
var ErrClosed = errors.New("gormstore: the store is closed")

// DefaultCloseTimeout is how long Close waits for the calls under way when
// it begins, unless WithCloseTimeout says otherwise: the Engine's default
// lease, which bounds the longest of them (Acquire's writes left running
// after their caller gave up).
const DefaultCloseTimeout = 30 * time.Second

// calls counts a Store's calls under way and, once closed, refuses new
// ones. A WaitGroup cannot do it: calls keep starting while Close waits,
// and a WaitGroup's Add may not race its Wait, nor may its count come back
// from zero during one.
type calls struct {
	// state is the number of calls under way, plus closedBit once Close
	// has begun.
	state atomic.Int64
	// idle is closed, once, when the store is closed and no call is under
	// way any more.
	idle     chan struct{}
	idleOnce sync.Once
	// onIdle, if set, runs once when idle is closed: it lets go of what
	// the calls used (the SQLite file's lock and writer).
	onIdle func()
}

const closedBit = int64(1) << 62

func newCalls() *calls { return &calls{idle: make(chan struct{})} }

// begin registers a call, or returns ErrClosed. A call that began must
// call end.
func (c *calls) begin() error {
	if c.state.Add(1)&closedBit != 0 {
		c.end()
		return ErrClosed
	}
	return nil
}

// hold registers work that carries on a call that has begun and has not
// ended (Acquire's writes, which may outlive the call): it cannot fail.
func (c *calls) hold() { c.state.Add(1) }

// end unregisters a call or a hold.
func (c *calls) end() {
	if c.state.Add(-1) == closedBit {
		c.idleOnce.Do(c.becomeIdle)
	}
}

// close refuses every call from now on and returns a channel closed when
// none is under way any more.
func (c *calls) close() <-chan struct{} {
	for {
		v := c.state.Load()
		if v&closedBit != 0 || c.state.CompareAndSwap(v, v|closedBit) {
			break
		}
	}
	if c.state.Load() == closedBit {
		c.idleOnce.Do(c.becomeIdle)
	}
	return c.idle
}

func (c *calls) becomeIdle() {
	if c.onIdle != nil {
		c.onIdle()
	}
	close(c.idle)
}

// running returns the number of calls under way.
func (c *calls) running() int64 { return c.state.Load() &^ closedBit }

// Close closes the store: every call begun from now on fails with
// ErrClosed; the background purger stops (a purge in progress is
// cancelled); and Close waits for the calls under way to end, among them
// the writes of Acquire calls whose caller gave up, which run for at most
// a lease (see Acquire), but no longer than the close timeout
// (WithCloseTimeout, DefaultCloseTimeout): it then returns an error
// saying how many still run. On SQLite, once its calls have ended, the
// store closes its connections and, if it was the last store of the
// process on the file, lets the file's lock go. It does not close the database, which
// belongs to the caller, and it may be called more than once, and
// concurrently.
//
// Close the store after the server has stopped taking requests and its
// handlers have returned (http.Server.Shutdown): a handler still running
// could not record its response, and its key would stay held until its
// lease ran out.
func (s *Store) Close() error {
	s.closeOnce.Do(s.stopPurge) // first: the purger's next batch is no failure to log
	idle := s.calls.close()
	<-s.purgeDone
	t := time.NewTimer(s.closeTimeout)
	defer t.Stop()
	select {
	case <-idle:
		return nil
	case <-t.C:
		return fmt.Errorf("gormstore: close: %d call(s) still under way after %v", s.calls.running(), s.closeTimeout)
	}
}
