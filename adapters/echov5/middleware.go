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
	"net/http"

	"github.com/idemkit/idemkit/adapters/internal/echocore"
	idem "github.com/idemkit/idemkit/core"
	"github.com/labstack/echo/v5"
)

// Middleware returns Echo middleware that runs every request through e.
func Middleware(e *idem.Engine, opts ...Option) echo.MiddlewareFunc {
	return echocore.Middleware[*echo.Context, echo.HandlerFunc](e, &echoV5, echocore.Apply(opts).core)
}

// echoV5 is Echo v5 for the middleware both Echo adapters share.
var echoV5 = echocore.Framework[*echo.Context]{
	Unrouted:   unrouted,
	StatusCode: echo.StatusCode,
	Response:   (*echo.Context).Response,
	// Above the writer the middleware before idemkit handed on (Echo's
	// *echo.Response, or a compressing one, which is how Echo v5's own
	// middleware wrap it), so the body stored is the one the handler wrote;
	// echo.UnwrapResponse still finds Echo's Response through it.
	Writer:    (*echo.Context).Response,
	SetWriter: (*echo.Context).SetResponse,
	// Echo's Response takes the first status it is given for the final
	// one: a 103 Early Hints goes below it.
	Informational: func(c *echo.Context) http.ResponseWriter {
		if res, err := echo.UnwrapResponse(c.Response()); err == nil {
			return res.ResponseWriter
		}
		return nil
	},
	RenderError: func(c *echo.Context, err error) { c.Echo().HTTPErrorHandler(c, err) },
}

// unrouted reports whether the request matched no route: middleware added
// with e.Use runs for those too, and their 404 or 405 is not guarded, nor
// what a RouteNotFound route (one a group with middleware registers by
// itself) answers.
func unrouted(c *echo.Context) bool {
	ri := c.RouteInfo()
	return ri.Name == echo.NotFoundRouteName || ri.Name == echo.MethodNotAllowedRouteName || ri.Method == echo.RouteNotFound
}
