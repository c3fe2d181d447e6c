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
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"reflect"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// Middleware returns middleware that runs every request through e. When
// it wraps an *http.ServeMux, requests the mux has no route for (its 404
// and 405) pass through untouched, as the policy says.
func Middleware(e *idem.Engine, opts ...Option) func(http.Handler) http.Handler {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return func(next http.Handler) http.Handler {
		if reflect.TypeOf(next) == timeoutHandlerType {
			panic("idemhttp: Middleware wraps an http.TimeoutHandler, which answers for a handler that goes on " +
				"running: a retry could then run beside it. Register the timeout outside this middleware, " +
				"or use idem.Config.HandlerTimeout")
		}
		mux, _ := next.(*http.ServeMux)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !e.Guards(r.Method) || mux != nil && unrouted(mux, r) {
				next.ServeHTTP(w, r)
				return
			}
			req := e.HTTPRequest(r)
			if o.scope != nil {
				req.Scope = o.scope(r)
			}
			d := e.Begin(r.Context(), &req)
			switch d.Action {
			case idem.Respond:
				d.WriteTo(w)
			case idem.Run:
				serveLocked(w, r, next, d)
			default:
				if d.Body != nil {
					body := new(bodyReader)
					body.Reset(d.Body)
					r.Body = body
				}
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

// bodyReader hands the body Begin read back to the handler.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

// locked is what serveLocked needs per request, in one allocation.
type locked struct {
	captureWriter
	body bodyReader
}

func serveLocked(w http.ResponseWriter, r *http.Request, next http.Handler, d idem.Decision) {
	lock := d.Lock
	x := &locked{captureWriter: captureWriter{ResponseWriter: w, lock: lock, status: http.StatusOK}}
	cw := &x.captureWriter
	if d.Body != nil {
		x.body.Reset(d.Body)
		r.Body = &x.body
	}
	defer func() {
		if p := recover(); p != nil {
			_ = lock.Abandon(r.Context(), idem.ReasonPanic)
			panic(p) // net/http or the caller's recovery middleware decides what the client sees
		}
	}()
	next.ServeHTTP(cw, r.WithContext(lock.Context()))
	if cw.streamed {
		_ = lock.Abandon(r.Context(), idem.ReasonStreamed)
		return
	}
	lock.FinishHTTP(r.Context(), w, cw.status, w.Header())
}

// captureWriter passes the response through to the client and copies its
// body into the lock. Flush and Hijack work as usual but mark the response
// as streamed, which is never stored.
type captureWriter struct {
	http.ResponseWriter
	lock        *idem.Lock
	status      int
	wroteHeader bool
	streamed    bool
	delivery    idem.Delivery
}

func (w *captureWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		if code == http.StatusSwitchingProtocols {
			w.streamed = true
		}
		if code >= 200 || code == http.StatusSwitchingProtocols {
			w.status, w.wroteHeader = code, true
			w.lock.WritingStatus(code)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write sends p and keeps all of it (see idem.Delivery): what is stored is
// what the handler wrote, whether or not the client took it.
func (w *captureWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.delivery.Write(w.ResponseWriter, w.lock, p)
}

// Flush implements http.Flusher.
func (w *captureWriter) Flush() {
	w.streamed = true
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack implements http.Hijacker.
func (w *captureWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("idemhttp: the underlying ResponseWriter cannot be hijacked")
	}
	w.streamed = true
	return h.Hijack()
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *captureWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
