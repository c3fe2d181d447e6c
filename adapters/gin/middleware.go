// Package idemgin is the Gin adapter of idemkit: middleware that makes POST
// and PATCH handlers safe to retry.
//
//	engine := idem.New(idem.Config{Store: memstore.New()})
//	r := gin.New()
//	r.Use(gin.Recovery(), idemgin.Middleware(engine))
//	r.POST("/v1/charges", createCharge)
//
// It works registered globally, on a group or on one route. Middleware
// registered before it (authentication, rate limiting, recovery) decides
// first; middleware registered after it, such as one rendering c.Errors,
// runs inside the capture, so what it writes is what gets stored. Errors in
// c.Errors still unrendered when idemkit's turn ends leave the response
// unknown, so it is not stored.
//
// The handler runs with the lock's context (c.Request.Context()): idem.HeldKey finds the
// key and owner token in it, and it is cancelled with cause
// idem.ErrLeaseLost if the lease is lost. Register timeout middleware
// before this one, or use idem.Config.HandlerTimeout: a timeout registered
// after it that runs the handler on a goroutine of its own
// (gin-contrib/timeout, http.TimeoutHandler) answers while the handler still
// runs, so its key stays locked until the lease runs out.
package idemgin

import (
	"bufio"
	"bytes"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
	idem "github.com/idemkit/idemkit/core"
)

// Middleware returns Gin middleware that runs every request through e.
func Middleware(e *idem.Engine, opts ...Option) gin.HandlerFunc {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return func(c *gin.Context) {
		r := c.Request
		if !e.Guards(r.Method) || c.FullPath() == "" {
			// Unguarded methods and requests that match no route (Gin's 404
			// and 405, which global middleware also sees) pass untouched.
			return // Gin runs the rest of the chain after us
		}
		req := e.HTTPRequest(r)
		if o.scope != nil {
			req.Scope = o.scope(c)
		}
		d := e.Begin(r.Context(), &req)
		switch d.Action {
		case idem.Respond:
			c.Abort()
			d.WriteTo(c.Writer)
		case idem.Run:
			serveLocked(c, d)
		default:
			if d.Body != nil {
				body := new(bodyReader)
				body.Reset(d.Body)
				r.Body = body
			}
			c.Next()
		}
	}
}

// bodyReader hands the body Begin read back to the handler, so bindings
// such as c.ShouldBindJSON read it as usual.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

// locked is what serveLocked needs per request, in one allocation.
type locked struct {
	captureWriter
	body bodyReader
}

func serveLocked(c *gin.Context, d idem.Decision) {
	lock, ctx, orig := d.Lock, c.Request.Context(), c.Writer
	x := &locked{captureWriter: captureWriter{ResponseWriter: orig, lock: lock}}
	cw := &x.captureWriter
	if d.Body != nil {
		x.body.Reset(d.Body)
		c.Request.Body = &x.body
	}
	c.Writer = cw
	req := c.Request
	c.Request = req.WithContext(lock.Context())
	defer func() {
		if !lock.HandlerMayRun() {
			// Writes after ours, such as recovery's 500, are not captured,
			// and middleware outside idemkit sees the request it passed on.
			// Not while a timeout middleware's goroutine may still run the
			// handler with this context.
			c.Writer = orig
			c.Request = req
		}
		if p := recover(); p != nil {
			_ = lock.Abandon(ctx, idem.ReasonPanic)
			panic(p) // gin.Recovery or net/http decides what the client sees
		}
	}()
	c.Next()
	switch {
	case cw.streamed:
		_ = lock.Abandon(ctx, idem.ReasonStreamed)
	case len(c.Errors) > 0 && orig.Size() <= 0:
		_ = lock.Abandon(ctx, idem.ReasonIncomplete) // errors left for an outer middleware to render
	default:
		// An unwritten status (c.Status without a body) is still pending
		// in Gin's writer, which sends it after the chain.
		lock.FinishHTTP(ctx, orig, orig.Status(), orig.Header())
	}
}

// captureWriter passes the response through to Gin's writer and copies its
// body into the lock. Flush and Hijack work as usual but mark the response
// as streamed, which is never stored.
type captureWriter struct {
	gin.ResponseWriter
	lock     *idem.Lock
	streamed bool
	delivery idem.Delivery
}

// WriteHeader tells the lock the status before Gin's writer records it.
func (w *captureWriter) WriteHeader(code int) {
	if code >= 200 {
		w.lock.WritingStatus(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write sends p and keeps all of it (see idem.Delivery): what is stored is
// what the handler wrote, whether or not the client took it.
func (w *captureWriter) Write(p []byte) (int, error) {
	return w.delivery.Write(w.ResponseWriter, w.lock, p)
}

// WriteString is how Gin's string renderers write.
func (w *captureWriter) WriteString(s string) (int, error) {
	return w.delivery.WriteString(w.ResponseWriter, w.lock, s)
}

// Flush implements http.Flusher; c.Stream and SSE flush after each event.
func (w *captureWriter) Flush() {
	w.streamed = true
	w.ResponseWriter.Flush()
}

// Hijack implements http.Hijacker.
func (w *captureWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.streamed = true
	return w.ResponseWriter.Hijack()
}

// Unwrap lets http.ResponseController reach Gin's writer.
func (w *captureWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
