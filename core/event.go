package idem

import (
	"context"
	"log/slog"
	"time"

	"github.com/idemkit/idemkit/core/idemevent"
)

// event starts an idemevent.Event for a request that began at began, as of at.
func (e *Engine) event(kind idemevent.Kind, method, path, key string, began, at time.Time) idemevent.Event {
	route := path
	for i := 0; i < len(route); i++ {
		if route[i] == '?' {
			route = route[:i]
			break
		}
	}
	ev := idemevent.New(kind, key, e.keySecret)
	ev.Method, ev.Route, ev.Duration = method, route, at.Sub(began)
	return ev
}

// listens reports whether an event at level would be read, by the
// OnEvent hook or the logger: the events of decisions and outcomes that
// go well (DEBUG) are not built, nor their times read, for nobody.
func (e *Engine) listens(ctx context.Context, level slog.Level) bool {
	return e.cfg.OnEvent != nil || e.cfg.Logger.Enabled(ctx, level)
}

// emit hands ev to the OnEvent hook and the logger, if they listen.
func (e *Engine) emit(ctx context.Context, ev *idemevent.Event, level slog.Level) {
	if e.cfg.OnEvent != nil {
		e.cfg.OnEvent(ctx, *ev)
	}
	level = e.throttled(ev, level)
	if !e.cfg.Logger.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs,
		slog.String("event", ev.Kind.String()),
		slog.String("method", ev.Method),
		slog.String("route", ev.Route),
		slog.Duration("duration", ev.Duration))
	if h := ev.KeyHash(); h != "" {
		attrs = append(attrs, slog.String("key_hash", h))
	}
	if ev.Status != 0 {
		attrs = append(attrs, slog.Int("status", ev.Status))
	}
	if ev.Reason != "" {
		attrs = append(attrs, slog.String("reason", string(ev.Reason)))
	}
	if ev.Err != nil {
		attrs = append(attrs, slog.String("error", ev.Err.Error()))
	}
	e.cfg.Logger.LogAttrs(ctx, level, "idempotency", attrs...)
}
