// Package idemhttp is the net/http adapter of idemkit: middleware that
// makes POST and PATCH handlers safe to retry, for the standard library and
// any router built on http.Handler (chi, gorilla/mux, ...).
//
//	engine := idem.New(idem.Config{Store: memstore.New()})
//	mux := http.NewServeMux()
//	mux.Handle("POST /v1/charges", createCharge)
//	http.ListenAndServe(addr, idemhttp.Middleware(engine)(mux))
//
// The handler runs with the lock's context (r.Context()): idem.HeldKey finds the
// key and owner token in it, and it is cancelled with cause
// idem.ErrLeaseLost if the lease is lost. Register timeout middleware
// before this one, or use idem.Config.HandlerTimeout: an http.TimeoutHandler
// registered after it answers while the handler still runs, so its key
// stays locked until the lease runs out (a TimeoutHandler given to
// Middleware itself is refused).
package idemhttp

import (
	"net/http"
	"reflect"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// Middleware returns middleware that runs every request through e. When
// it wraps an *http.ServeMux, requests the mux has no route for (its 404
// and 405) pass through untouched, as the policy says.
func Middleware(e *idem.Engine, opts ...Option) func(http.Handler) http.Handler {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	a := e.Adapter()
	return func(next http.Handler) http.Handler {
		if reflect.TypeOf(next) == timeoutHandlerType {
			panic("idemhttp: Middleware wraps an http.TimeoutHandler, which answers for a handler that goes on " +
				"running: a retry could then run beside it. Register the timeout outside this middleware, " +
				"or use idem.Config.HandlerTimeout")
		}
		mux, _ := next.(*http.ServeMux)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !a.Guards(r.Method) || o.skip != nil && o.skip(r) || mux != nil && unrouted(mux, r) {
				next.ServeHTTP(w, r)
				return
			}
			req := a.HTTPRequest(r)
			if o.key != nil {
				req.KeyLines = nil
				if key, ok := o.key(r); ok {
					req.KeyLines = []string{key}
				}
			}
			if o.scope != nil {
				req.Scope = o.scope(r)
			}
			d := a.Begin(r.Context(), req)
			switch d.Action {
			case exchange.Respond:
				d.WriteTo(w)
			case exchange.Run:
				serveLocked(w, r, next, d)
			default:
				d.SetBody(r)
				next.ServeHTTP(w, r)
			}
		})
	}
}

// timeoutHandlerType is the type http.TimeoutHandler returns.
var timeoutHandlerType = reflect.TypeOf(http.TimeoutHandler(http.NotFoundHandler(), time.Second, ""))

// unrouted reports whether mux has no route for r: its 404 or 405 is not
// guarded. Other routers give no such answer; wrap the routes rather than
// the router with them.
func unrouted(mux *http.ServeMux, r *http.Request) bool {
	_, pattern := mux.Handler(r)
	return pattern == ""
}

func serveLocked(w http.ResponseWriter, r *http.Request, next http.Handler, d exchange.Decision) {
	c := new(exchange.ResponseCapture) // one allocation for the writer and the body
	c.Reset(w, d.Lock)
	c.SetRequestBody(r, d.Body)
	ctx := r.Context()
	defer d.Lock.AbandonOnPanic(ctx)
	next.ServeHTTP(c, r.WithContext(d.Lock.Context()))
	c.End(ctx, c.Status())
}
