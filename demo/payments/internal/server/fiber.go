package server

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
	idemfiber "github.com/idemkit/idemkit/adapters/fiber"
	"github.com/idemkit/idemkit/core/exchange"
	gormstore "github.com/idemkit/idemkit/stores/gorm"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/flaky"
)

type fiberServer struct{ app *fiber.App }

func newFiber(cfg Config) *fiberServer {
	app := fiber.New(fiber.Config{
		DisableStartupMessage: true,
		ErrorHandler: func(c *fiber.Ctx, err error) error {
			status := fiber.StatusInternalServerError
			if fe, ok := err.(*fiber.Error); ok {
				status = fe.Code
			}
			return writeFiber(c, frameworkError(cfg.API, status))
		},
	})
	app.Use(flakyFiber(cfg.Network))
	app.Use(func(c *fiber.Ctx) error {
		start := time.Now()
		err := c.Next()
		logFastHTTP(cfg, "fiber", c.Context(), start)
		return err
	})
	app.Use(func(c *fiber.Ctx) error {
		if !guardFastHTTP(cfg.API, apiRoutes(cfg), c.Method(), c.Path(), c.Response()) {
			return nil
		}
		return c.Next()
	})
	app.Use(func(c *fiber.Ctx) error {
		return stripeFastHTTP(c.Context(), c.Next, func(err error) error { return c.App().ErrorHandler(c, err) })
	})
	app.Use(recover.New())
	for _, p := range pages(cfg) { // Fiber routes HEAD wherever GET is
		app.Get(p.path, adaptor.HTTPHandler(p.handler))
	}

	// Registered before the /v1 group, whose authentication would
	// otherwise run for it too: Fiber runs a group's handlers for every
	// path under its prefix.
	app.Post(api.WebhookPath,
		func(c *fiber.Ctx) error {
			if !checkWebhookFastHTTP(cfg.API, c.Context()) {
				return nil
			}
			return c.Next()
		},
		fiberTxSlot,
		idemfiber.New(cfg.Engine,
			idemfiber.WithKey(func(c *fiber.Ctx) (string, bool) { return webhookID(fastHTTPHeader(c.Context())) }),
			idemfiber.WithScope(func(*fiber.Ctx) string { return webhookScope() })),
		withUserContext(cfg.API.WebhookHandler()),
	)
	v1 := app.Group("/v1",
		func(c *fiber.Ctx) error {
			if _, ok := api.Account(c.Get("Authorization")); !ok {
				return writeFiber(c, cfg.API.Unauthorized())
			}
			return c.Next()
		},
		fiberTxSlot,
		idemfiber.New(cfg.Engine, idemfiber.WithScope(func(c *fiber.Ctx) string {
			return scope(c.Get("Authorization"))
		})),
	)
	v1.All("/*", withUserContext(apiHandler(cfg)))
	return &fiberServer{app: app}
}

// fiberTxSlot gives the request a transaction slot (gormstore.WithTxSlot)
// in its user context.
func fiberTxSlot(c *fiber.Ctx) error {
	ctx, done := gormstore.WithTxSlot(c.UserContext())
	defer done()
	c.SetUserContext(ctx)
	return c.Next()
}

// withUserContext mounts a net/http handler like adaptor.HTTPHandler, but
// gives it Fiber's user context, which carries the transaction slot.
func withUserContext(h http.Handler) fiber.Handler {
	return func(c *fiber.Ctx) error {
		serveWithContext(c.Context(), c.UserContext(), h)
		return nil
	}
}

// flakyFiber is flaky.Network.Middleware for Fiber: the fault rides in
// the user context, which the API handler gets, and a dropped answer is
// broken off on the hijacked connection instead of being sent.
func flakyFiber(n *flaky.Network) fiber.Handler {
	return func(c *fiber.Ctx) error {
		f := planFault(n, c.Context(), c.Path())
		if f == flaky.None {
			return c.Next()
		}
		c.SetUserContext(flaky.WithFault(c.UserContext(), f))
		err := c.Next()
		if f == flaky.Dropped {
			if err != nil {
				// Let Fiber's error handler set the status it would send.
				err = c.App().ErrorHandler(c, err)
			}
			dropFastHTTP(n, c.Context(), c.UserContext())
		}
		return err
	}
}

func writeFiber(c *fiber.Ctx, resp exchange.Response) error {
	writeFastHTTP(c.Response(), resp)
	return nil
}

func (s *fiberServer) Serve(ln net.Listener) error { return s.app.Listener(ln) }

func (s *fiberServer) Shutdown(ctx context.Context) error { return s.app.ShutdownWithContext(ctx) }
