package idem

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemevent"
)

// throttleInterval is how often a kind of trouble may be logged at its
// level: the first line of each kind (event and reason) in an interval is
// logged, the others at DEBUG, and at the interval's end one line says how
// many were held back. So an outage writes a few lines a minute, not one
// per request, and every occurrence is still an event (OnEvent).
const throttleInterval = time.Minute

type throttleKey struct {
	kind   idemevent.Kind
	reason exchange.Reason
}

// throttle keeps the WARN and ERROR lines of an Engine's log to one per
// kind of trouble an interval.
type throttle struct {
	mu    sync.Mutex
	kinds map[throttleKey]*throttled
}

type throttled struct {
	level    slog.Level
	until    time.Time // the end of the interval that began with a logged line
	held     int       // lines held back since
	flushing bool      // a timer will log the count at until
}

// throttled returns the level to log ev at: its own, or DEBUG if a line of its
// kind was logged at that level less than an interval ago.
func (e *Engine) throttled(ev *idemevent.Event, level slog.Level) slog.Level {
	if level < slog.LevelWarn {
		return level
	}
	now := e.clock.Now()
	k := throttleKey{ev.Kind, ev.Reason}
	t := &e.throttle
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.kinds == nil {
		t.kinds = map[throttleKey]*throttled{}
	}
	s := t.kinds[k]
	if s == nil || !now.Before(s.until) && !s.flushing {
		t.kinds[k] = &throttled{level: level, until: now.Add(throttleInterval)}
		return level
	}
	s.held++
	if !s.flushing {
		s.flushing = true
		e.clock.AfterFunc(s.until.Sub(now), func() { e.flushThrottled(k) })
	}
	return slog.LevelDebug
}

// flushThrottled logs how many lines of kind k were held back in the
// interval that just ended, and lets the next one through.
func (e *Engine) flushThrottled(k throttleKey) {
	t := &e.throttle
	t.mu.Lock()
	s := t.kinds[k]
	delete(t.kinds, k)
	t.mu.Unlock()
	if s == nil || s.held == 0 {
		return
	}
	attrs := []slog.Attr{slog.String("event", k.kind.String()), slog.Int("count", s.held),
		slog.Duration("interval", throttleInterval)}
	if k.reason != "" {
		attrs = append(attrs, slog.String("reason", string(k.reason)))
	}
	e.cfg.Logger.LogAttrs(context.Background(), s.level, "idempotency events not logged one by one", attrs...)
}
