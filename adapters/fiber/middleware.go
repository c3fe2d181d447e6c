// Package idemfiber is the Fiber (v2) adapter of idemkit: middleware that
// makes POST and PATCH handlers safe to retry.
//
//	engine := idem.New(idem.Config{Store: memstore.New()})
//	app := fiber.New(fiber.Config{ErrorHandler: idemfiber.ErrorHandler(engine, nil)})
//	app.Use(recover.New())        // panics release the key, then reach recover
//	app.Use(idemfiber.New(engine)) // or per group or route
//	app.Post("/v1/charges", createCharge)
//
// Fiber runs on fasthttp, which reuses request and response buffers once a
// handler returns. The middleware copies everything idemkit keeps (method,
// path, key, scope, response headers and body) out of those buffers.
//
// The handler runs with the lock's context as c.UserContext(): idem.HeldKey
// finds the key and owner token in it, and it is cancelled with cause
// idem.ErrLeaseLost if the lease is lost. Register timeout middleware
// before this one, or use idem.Config.HandlerTimeout.
//
// fasthttp refuses a body over fiber.Config.BodyLimit before any
// middleware runs; ErrorHandler, as the app's error handler, answers it
// with idemkit's payload-too-large problem.
package idemfiber

import (
	"github.com/gofiber/fiber/v2"

	"github.com/idemkit/idemkit/adapters/internal/fasthttpcore"
	idem "github.com/idemkit/idemkit/core"
)

// New returns Fiber middleware that runs every request through e. Register it
// with app.Use, on a group, or on a single route, after the middleware that
// must decide first (recover, authentication, rate limiting).
//
// A handler's error is rendered by the app's ErrorHandler inside the
// middleware, so that the response the client sees is the one stored; the
// middleware then returns nil, and middleware registered before it sees the
// rendered response rather than the error.
func New(e *idem.Engine, opts ...Option) fiber.Handler {
	return fasthttpcore.Middleware(e, &fiberV2, fasthttpcore.Apply(opts).core)
}

// fiberV2 is Fiber v2 for the middleware both Fiber adapters share.
var fiberV2 = fasthttpcore.Framework[*fiber.Ctx]{
	Context:      (*fiber.Ctx).UserContext,
	SetContext:   (*fiber.Ctx).SetUserContext,
	RequestCtx:   (*fiber.Ctx).Context,
	ErrorHandler: func(c *fiber.Ctx, err error) error { return c.App().ErrorHandler(c, err) },
	Handlers:     func(c *fiber.Ctx) uint32 { return c.App().HandlersCount() },
	Routes: func(c *fiber.Ctx, add func(method, path string)) {
		for _, r := range c.App().GetRoutes(true) {
			add(r.Method, r.Path)
		}
	},
	Routing: func(c *fiber.Ctx) (caseSensitive, strict bool) {
		cfg := c.App().Config()
		return cfg.CaseSensitive, cfg.StrictRouting
	},
	Match: func(path, pattern string, caseSensitive, strict bool) bool {
		return fiber.RoutePatternMatch(path, pattern, fiber.Config{CaseSensitive: caseSensitive, StrictRouting: strict})
	},
	BodyLimit:           func(c *fiber.Ctx) int { return c.App().Server().MaxRequestBodySize },
	ErrBodyLimit:        fiber.ErrRequestEntityTooLarge,
	DefaultErrorHandler: fiber.DefaultErrorHandler,
}
