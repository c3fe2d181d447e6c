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
	idem "github.com/idemkit/idemkit/core"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
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
	app.Get("/metrics", adaptor.HTTPHandler(cfg.Metrics))
	app.Get(api.DocsPath, adaptor.HTTPHandler(cfg.Docs))
	app.Get(api.DocsPath+"/:name", adaptor.HTTPHandler(cfg.Docs))
	app.Get(DebugPath, adaptor.HTTPHandler(cfg.Debug))

	v1 := app.Group("/v1",
		func(c *fiber.Ctx) error {
			if _, ok := api.Account(c.Get("Authorization")); !ok {
				return writeFiber(c, cfg.API.Unauthorized())
			}
			return c.Next()
		},
		func(c *fiber.Ctx) error {
			ctx, done := gormstore.WithTxSlot(c.UserContext())
			defer done()
			c.SetUserContext(ctx)
			return c.Next()
		},
		idemfiber.New(cfg.Engine, idemfiber.WithScope(func(c *fiber.Ctx) string {
			return scope(c.Get("Authorization"))
		})),
	)
	v1.All("/*", withUserContext(cfg.API.Handler()))
	return &fiberServer{app: app}
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
