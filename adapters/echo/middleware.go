// Package idemecho is the Echo adapter of idemkit: middleware that makes
// POST and PATCH handlers safe to retry.
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
// The handler runs with the lock's context (c.Request().Context()): idem.HeldKey finds the
// key and owner token in it, and it is cancelled with cause
// idem.ErrLeaseLost if the lease is lost. Register timeout middleware
// before this one, or use idem.Config.HandlerTimeout: a timeout registered
// after it (http.TimeoutHandler, Echo's Timeout) answers while the handler
// still runs, so its key stays locked until the lease runs out.
package idemecho

import (
	"errors"
	"io"
	"net/http"
	"reflect"

	idem "github.com/idemkit/idemkit/core"
	"github.com/labstack/echo/v4"
)

// Middleware returns Echo middleware that runs every request through e.
func Middleware(e *idem.Engine, opts ...Option) echo.MiddlewareFunc {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
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

// Echo's own handlers for requests that match no route.
var (
	notFound         = reflect.ValueOf(echo.NotFoundHandler).Pointer()
	methodNotAllowed = reflect.ValueOf(echo.MethodNotAllowedHandler).Pointer()
)

// unrouted reports whether the request matched no route: middleware added
// with e.Use runs for those too, and their 404 or 405 is not guarded.
func unrouted(c echo.Context) bool {
	h := reflect.ValueOf(c.Handler()).Pointer()
	return h == notFound || h == methodNotAllowed
}

// bodyLimitReader reports Echo's BodyLimit middleware, registered before
// idemkit, refusing a body (chunked ones are only found too large while
// read) as idem.ErrBodyTooLarge, so the client gets 413 payload-too-large
// like any other oversized body.
type bodyLimitReader struct{ io.Reader }

func (r bodyLimitReader) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	if err != nil && err != io.EOF {
		var he *echo.HTTPError
		if errors.As(err, &he) && he.Code == http.StatusRequestEntityTooLarge {
			err = idem.ErrBodyTooLarge
		}
	}
	return n, err
}

func serveLocked(c echo.Context, next echo.HandlerFunc, d idem.Decision) error {
	lock, ctx, res, orig := d.Lock, c.Request().Context(), c.Response(), c.Response().Writer
	x := new(idem.ResponseCapture) // one allocation for the writer and the body
	x.Reset(orig, lock)
	x.SetRequestBody(c.Request(), d.Body)
	// Below echo.Response, so its Committed, Before and After hooks and the
	// middleware registered before idemkit see the response as usual.
	res.Writer = x
	req := c.Request()
	c.SetRequest(req.WithContext(lock.Context()))
	defer lock.AbandonOnPanic(ctx)
	defer func() {
		if !lock.HandlerMayRun() {
			// Writes after ours, such as Recover's 500, are not captured,
			// and middleware outside idemkit sees the request it passed on.
			// Not while a timeout middleware's goroutine may still run the
			// handler: Echo's Timeout swaps both from there.
			res.Writer = orig
			c.SetRequest(req)
		}
	}()
	if err := next(c); err != nil {
		// Rendered here, the error response is captured like any other.
		// The error is then handled: returning it would render it twice.
		c.Error(err)
	}
	x.End(ctx, x.Status())
	return nil
}
