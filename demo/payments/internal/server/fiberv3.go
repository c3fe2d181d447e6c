package server

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/adaptor"
	"github.com/gofiber/fiber/v3/middleware/recover"
	idemfiber "github.com/idemkit/idemkit/adapters/fiberv3"
	gormstore "github.com/idemkit/idemkit/stores/gorm"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/flaky"
)

// The Fiber v3 server is the Fiber v2 one (fiber.go) with v3's Ctx: an
// interface whose Context is what v2 called the user context, and whose
// RequestCtx is fasthttp's. Its handlers are bounded by the Engine's
// HandlerTimeout, not by Fiber's timeout middleware: that one answers 408
// and leaves the handler running, so behind idemkit the adapter would keep
// the key locked a lease more (exchange.Lock.LeaveRunning) with nothing gained.

type fiberV3Server struct{ app *fiber.App }

func newFiberV3(cfg Config) *fiberV3Server {
	app := fiber.New(fiber.Config{
		ErrorHandler: func(c fiber.Ctx, err error) error {
			status := fiber.StatusInternalServerError
			if fe, ok := err.(*fiber.Error); ok {
				status = fe.Code
			}
			writeFastHTTP(c.Response(), frameworkError(cfg.API, status))
			return nil
		},
	})
	app.Use(flakyFiberV3(cfg.Network))
	app.Use(func(c fiber.Ctx) error {
		start := time.Now()
		err := c.Next()
		logFastHTTP(cfg, "fiberv3", c.RequestCtx(), start)
		return err
	})
	app.Use(func(c fiber.Ctx) error {
		if !guardFastHTTP(cfg.API, apiRoutes(cfg), c.Method(), c.Path(), c.Response()) {
			return nil
		}
		return c.Next()
	})
	app.Use(func(c fiber.Ctx) error {
		return stripeFastHTTP(c.RequestCtx(), c.Next, func(err error) error { return c.App().ErrorHandler(c, err) })
	})
	app.Use(recover.New())
	for _, p := range pages(cfg) { // Fiber routes HEAD wherever GET is
		app.Get(p.path, adaptor.HTTPHandler(p.handler))
	}

	// Before the /v1 group, as on Fiber v2.
	app.Post(api.WebhookPath,
		func(c fiber.Ctx) error {
			if !checkWebhookFastHTTP(cfg.API, c.RequestCtx()) {
				return nil
			}
			return c.Next()
		},
		fiberV3TxSlot,
		idemfiber.New(cfg.Engine,
			idemfiber.WithKey(func(c fiber.Ctx) (string, bool) { return webhookID(fastHTTPHeader(c.RequestCtx())) }),
			idemfiber.WithScope(func(fiber.Ctx) string { return webhookScope() })),
		withContextV3(cfg.API.WebhookHandler()),
	)
	v1 := app.Group("/v1",
		func(c fiber.Ctx) error {
			if _, ok := api.Account(c.Get("Authorization")); !ok {
				writeFastHTTP(c.Response(), cfg.API.Unauthorized())
				return nil
			}
			return c.Next()
		},
		fiberV3TxSlot,
		idemfiber.New(cfg.Engine, idemfiber.WithScope(func(c fiber.Ctx) string {
			return scope(c.Get("Authorization"))
		})),
	)
	v1.All("/*", withContextV3(apiHandler(cfg)))
	return &fiberV3Server{app: app}
}

// fiberV3TxSlot gives the request a transaction slot (gormstore.WithTxSlot)
// in its context.
func fiberV3TxSlot(c fiber.Ctx) error {
	ctx, done := gormstore.WithTxSlot(c.Context())
	defer done()
	c.SetContext(ctx)
	return c.Next()
}

// withContextV3 mounts a net/http handler like adaptor.HTTPHandler, but
// gives it the Ctx's context, which carries the transaction slot and
// idemkit's lock.
func withContextV3(h http.Handler) fiber.Handler {
	return func(c fiber.Ctx) error {
		serveWithContext(c.RequestCtx(), c.Context(), h)
		return nil
	}
}

// flakyFiberV3 is flakyFiber for Fiber v3.
func flakyFiberV3(n *flaky.Network) fiber.Handler {
	return func(c fiber.Ctx) error {
		f := planFault(n, c.RequestCtx(), c.Path())
		if f == flaky.None {
			return c.Next()
		}
		c.SetContext(flaky.WithFault(c.Context(), f))
		err := c.Next()
		if f == flaky.Dropped {
			if err != nil {
				err = c.App().ErrorHandler(c, err)
			}
			dropFastHTTP(n, c.RequestCtx(), c.Context())
		}
		return err
	}
}

func (s *fiberV3Server) Serve(ln net.Listener) error {
	return s.app.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
}

func (s *fiberV3Server) Shutdown(ctx context.Context) error { return s.app.ShutdownWithContext(ctx) }
