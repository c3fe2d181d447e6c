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
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// Middleware returns Gin middleware that runs every request through e.
func Middleware(e *idem.Engine, opts ...Option) gin.HandlerFunc {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	a := e.Adapter()
	return func(c *gin.Context) {
		r := c.Request
		if !a.Guards(r.Method) || c.FullPath() == "" || o.skip != nil && o.skip(c) {
			// Unguarded methods, requests that match no route (Gin's 404
			// and 405, which global middleware also sees) and skipped
			// requests pass untouched.
			return // Gin runs the rest of the chain after us
		}
		req := a.HTTPRequest(r)
		if o.key != nil {
			req.KeyLines = nil
			if key, ok := o.key(c); ok {
				req.KeyLines = []string{key}
			}
		}
		if o.scope != nil {
			req.Scope = o.scope(c)
		}
		d := a.Begin(r.Context(), req)
		switch d.Action {
		case exchange.Respond:
			c.Abort()
			d.WriteTo(c.Writer)
		case exchange.Run:
			serveLocked(c, d)
		default:
			d.SetBody(r)
			c.Next()
		}
	}
}

// timeouts names the timeout middleware of Gin's ecosystem that may be
// registered inside idemkit and answer for a handler it leaves running
// (see exchange.ResponseCapture.WatchTimeouts): gin-contrib/timeout's
// package. http.TimeoutHandler the capture knows by itself.
var timeouts = []string{"github.com/gin-contrib/timeout."}

func serveLocked(c *gin.Context, d exchange.Decision) {
	lock, ctx, orig := d.Lock, c.Request.Context(), c.Writer
	x := &captureWriter{ResponseWriter: orig} // one allocation for the writer and the body
	x.capture.WatchTimeouts(timeouts)
	x.capture.Reset(orig, lock)
	x.capture.HeaderSentWithBody()
	x.capture.SetRequestBody(c.Request, d.Body)
	c.Writer = x
	req := c.Request
	c.Request = req.WithContext(lock.Context())
	defer lock.AbandonOnPanic(ctx)
	defer func() {
		if !lock.HandlerMayRun() {
			// Writes after ours, such as recovery's 500, are not captured,
			// and middleware outside idemkit sees the request it passed on.
			// Not while a timeout middleware's goroutine may still run the
			// handler with this context.
			c.Writer = orig
			c.Request = req
		}
	}()
	c.Next()
	if len(c.Errors) > 0 && orig.Size() <= 0 {
		_ = lock.Abandon(ctx, exchange.ReasonIncomplete) // errors left for an outer middleware to render
		return
	}
	// An unwritten status (c.Status without a body) is still pending in
	// Gin's writer, which sends it after the chain.
	x.capture.End(ctx, orig.Status())
}

// captureWriter is Gin's writer with its writes going through the shared
// capture (exchange.ResponseCapture) to Gin's own writer below.
type captureWriter struct {
	gin.ResponseWriter
	capture exchange.ResponseCapture
}

func (w *captureWriter) WriteHeader(code int)                         { w.capture.WriteHeader(code) }
func (w *captureWriter) Write(p []byte) (int, error)                  { return w.capture.Write(p) }
func (w *captureWriter) WriteString(s string) (int, error)            { return w.capture.WriteString(s) }
func (w *captureWriter) Flush()                                       { w.capture.Flush() }
func (w *captureWriter) Unwrap() http.ResponseWriter                  { return w.ResponseWriter }
func (w *captureWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) { return w.capture.Hijack() }
