// Package idemecho is the Echo v5 adapter of idemkit: middleware that makes
// POST and PATCH handlers safe to retry. It keeps the name of the Echo v4
// adapter's package, as Echo v5 keeps Echo's, so moving an application
// from one to the other changes only import paths.
//
//	engine := idem.New(idem.Config{Store: memstore.New()})
//	e := echo.New()
//	e.Use(middleware.Recover(), idemecho.Middleware(engine))
//	e.POST("/v1/charges", createCharge)
//
// It works registered with Use, on a group or on one route. A handler's
// returned error is rendered by e.HTTPErrorHandler inside the capture, so
// it is stored or not exactly as if the handler had written that response.
//
// The handler runs with the lock's context (c.Request().Context()):
// idem.HeldKey finds the key and owner token in it, and it is cancelled
// with cause idem.ErrLeaseLost if the lease is lost. Echo v5's
// ContextTimeout only sets a deadline on that context, so it may be
// registered on either side of idemkit; idem.Config.HandlerTimeout does
// the same from inside. A timeout that answers while the handler goes on
// running (http.TimeoutHandler through echo.WrapMiddleware) belongs before
// idemkit: after it, the key stays locked until the lease runs out.
package idemecho

import (
	"io"
	"net/http"

	idem "github.com/idemkit/idemkit/core"
	"github.com/labstack/echo/v5"
)

// Middleware returns Echo middleware that runs every request through e.
func Middleware(e *idem.Engine, opts ...Option) echo.MiddlewareFunc {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			r := c.Request()
			if !e.Guards(r.Method) || unrouted(c) || o.skip != nil && o.skip(c) {
				return next(c)
			}
			req := e.HTTPRequest(r)
			if req.BodyReader != nil {
				req.BodyReader = bodyLimitReader{req.BodyReader}
			}
			if o.key != nil {
				req.KeyLines = nil
				if key, ok := o.key(c); ok {
					req.KeyLines = []string{key}
				}
			}
			if o.scope != nil {
				req.Scope = o.scope(c)
			}
			d := e.Begin(r.Context(), &req)
			switch d.Action {
			case idem.ActionRespond:
				d.WriteTo(c.Response())
				return nil
			case idem.ActionRun:
				return serveLocked(c, next, d)
			default:
				d.SetBody(r)
				return next(c)
			}
		}
	}
}

// unrouted reports whether the request matched no route: middleware added
// with e.Use runs for those too, and their 404 or 405 is not guarded, nor
// what a RouteNotFound route (one a group with middleware registers by
// itself) answers.
func unrouted(c *echo.Context) bool {
	ri := c.RouteInfo()
	return ri.Name == echo.NotFoundRouteName || ri.Name == echo.MethodNotAllowedRouteName || ri.Method == echo.RouteNotFound
}

// bodyLimitReader reports Echo's BodyLimit middleware, registered before
// idemkit, refusing a body (chunked ones are only found too large while
// read) as idem.ErrBodyTooLarge, so the client gets 413 payload-too-large
// like any other oversized body.
type bodyLimitReader struct{ io.Reader }

func (r bodyLimitReader) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	if err != nil && err != io.EOF && echo.StatusCode(err) == http.StatusRequestEntityTooLarge {
		err = idem.ErrBodyTooLarge
	}
	return n, err
}

func serveLocked(c *echo.Context, next echo.HandlerFunc, d idem.Decision) error {
	lock, ctx, orig := d.Lock, c.Request().Context(), c.Response()
	x := new(captureWriter) // one allocation for the writer and the body
	x.Reset(orig, lock)
	x.SetRequestBody(c.Request(), d.Body)
	if res, err := echo.UnwrapResponse(orig); err == nil {
		x.belowEcho = res.ResponseWriter
	}
	// Above the writer the middleware before idemkit handed on (Echo's
	// *echo.Response, or a compressing one, which is how Echo v5's own
	// middleware wrap it), so the body stored is the one the handler wrote;
	// echo.UnwrapResponse still finds Echo's Response through it.
	c.SetResponse(x)
	req := c.Request()
	c.SetRequest(req.WithContext(lock.Context()))
	defer lock.AbandonOnPanic(ctx)
	defer func() {
		if !lock.HandlerMayRun() {
			// Writes after ours, such as the 500 of a recovered panic, are
			// not captured, and middleware outside idemkit sees the request
			// it passed on. Not while a timeout's goroutine may still run
			// the handler with this context.
			c.SetResponse(orig)
			c.SetRequest(req)
		}
	}()
	if err := next(c); err != nil {
		// Rendered here, the error response is captured like any other.
		// The error is then handled: returning it would render it twice.
		c.Echo().HTTPErrorHandler(c, err)
	}
	x.End(ctx, x.Status())
	return nil
}

// captureWriter is the shared capture (idem.ResponseCapture), with the
// informational statuses a handler sends (103 Early Hints) passed to the
// writer below Echo's Response: that one takes the first status it is
// given as the final one and drops the real one after it, so the client
// would get a 200 while the capture recorded, say, a 201.
type captureWriter struct {
	idem.ResponseCapture
	belowEcho http.ResponseWriter // nil if Echo's Response is not in the chain
}

func (w *captureWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols && w.belowEcho != nil {
		w.belowEcho.WriteHeader(code)
		return
	}
	w.ResponseCapture.WriteHeader(code)
}
