package server

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"
	idemfiber "github.com/idemkit/idemkit/adapters/fiber"
	idem "github.com/idemkit/idemkit/core"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/checkout"
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
		// Copies: fasthttp reuses these buffers once the handler returns.
		logLine(cfg.Logger, "fiber", c.Method(), string(c.Request().URI().Path()), c.Response().StatusCode(),
			string(c.Response().Header.Peek(idem.ReplayedHeader)) == "true", time.Since(start))
		return err
	})
	app.Use(guardFiber(cfg.API, apiRoutes(cfg)))
	app.Use(recover.New())
	app.Get("/healthz", adaptor.HTTPHandlerFunc(healthz))
	for _, path := range checkout.Paths {
		app.Get(path, adaptor.HTTPHandler(cfg.Checkout))
	}
	if !cfg.SeparateAdmin {
		app.Get("/metrics", adaptor.HTTPHandler(cfg.Metrics))
		app.Get(DebugPath, adaptor.HTTPHandler(cfg.Debug))
	}
	app.Get(api.DocsPath, adaptor.HTTPHandler(cfg.Docs))
	app.Get(api.DocsPath+"/:name", adaptor.HTTPHandler(cfg.Docs))

	// Registered before the /v1 group, whose authentication would
	// otherwise run for it too: Fiber runs a group's handlers for every
	// path under its prefix.
	app.Post(api.WebhookPath,
		func(c *fiber.Ctx) error {
			if resp, ok := cfg.API.WebhookBody(c.Body(), nil); !ok {
				return writeFiber(c, resp)
			}
			if resp, ok := cfg.API.CheckWebhook(fiberHeader(c), c.Body()); !ok {
				return writeFiber(c, resp)
			}
			return c.Next()
		},
		fiberTxSlot,
		idemfiber.New(cfg.Engine,
			idemfiber.WithKey(func(c *fiber.Ctx) (string, bool) { return webhookID(fiberHeader(c)) }),
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

// fiberHeader reads c's request header fields.
func fiberHeader(c *fiber.Ctx) func(string) string {
	return func(name string) string { return c.Get(name) }
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
		ctx := c.UserContext()
		fasthttpadaptor.NewFastHTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r.WithContext(ctx))
		}))(c.Context())
		return nil
	}
}

// flakyFiber is flaky.Network.Middleware for Fiber: the fault rides in
// the user context, which the API handler gets, and a dropped answer is
// broken off on the hijacked connection instead of being sent.
func flakyFiber(n *flaky.Network) fiber.Handler {
	return func(c *fiber.Ctx) error {
		f := n.Plan(c.Method(), c.Path(), c.Get(flaky.Header), c.Get("Authorization"), c.Get("Idempotency-Key"))
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
			// Copies: fasthttp reuses the response's buffers.
			status, ctx, header := c.Response().StatusCode(), c.UserContext(), http.Header{}
			for k, v := range c.Response().Header.All() {
				header.Add(string(k), string(v))
			}
			body := bytes.Clone(c.Response().Body())
			c.Context().HijackSetNoResponse(true)
			c.Context().Hijack(func(conn net.Conn) { n.Drop(ctx, conn, status, header, body) })
		}
		return err
	}
}

func writeFiber(c *fiber.Ctx, resp idem.Response) error {
	for _, f := range resp.Header {
		for _, v := range f.Values {
			c.Response().Header.Add(f.Name, v)
		}
	}
	return c.Status(resp.Status).Send(resp.Body)
}

func (s *fiberServer) Serve(ln net.Listener) error { return s.app.Listener(ln) }

func (s *fiberServer) Shutdown(ctx context.Context) error { return s.app.ShutdownWithContext(ctx) }
