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
	"net/http"
	"reflect"

	"github.com/idemkit/idemkit/adapters/internal/echocore"
	idem "github.com/idemkit/idemkit/core"
	"github.com/labstack/echo/v4"
)

// Middleware returns Echo middleware that runs every request through e.
func Middleware(e *idem.Engine, opts ...Option) echo.MiddlewareFunc {
	return echocore.Middleware[echo.Context, echo.HandlerFunc](e, &echoV4, echocore.Apply(opts).core)
}

// echoV4 is Echo v4 for the middleware both Echo adapters share.
var echoV4 = echocore.Framework[echo.Context]{
	Unrouted: unrouted,
	StatusCode: func(err error) int {
		if he := (*echo.HTTPError)(nil); errors.As(err, &he) {
			return he.Code
		}
		return 0
	},
	Response: func(c echo.Context) http.ResponseWriter { return c.Response() },
	// Below echo.Response, so its Committed, Before and After hooks and the
	// middleware registered before idemkit see the response as usual.
	Writer:      func(c echo.Context) http.ResponseWriter { return c.Response().Writer },
	SetWriter:   func(c echo.Context, w http.ResponseWriter) { c.Response().Writer = w },
	RenderError: echo.Context.Error,
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
