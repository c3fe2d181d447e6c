package server

import (
	"net/http"

	idemecho "github.com/idemkit/idemkit/adapters/echov5"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
)

// newEchoV5 is newEcho (echo.go) on Echo v5, whose Context is a struct
// behind a pointer, and whose error handler finds whether the response
// went out through echo.UnwrapResponse.
func newEchoV5(cfg Config) http.Handler {
	e := echo.New()
	e.Use(middleware.Recover())
	e.HTTPErrorHandler = func(c *echo.Context, err error) {
		if r, _ := echo.UnwrapResponse(c.Response()); r != nil && r.Committed {
			return
		}
		status := echo.StatusCode(err)
		if status == 0 {
			status = http.StatusInternalServerError
		}
		api.WriteResponse(c.Response(), frameworkError(cfg.API, status))
	}
	// Echo routes HEAD only where it is registered.
	for _, p := range pages(cfg) {
		e.Match(getOnly, p.path, echo.WrapHandler(p.handler))
	}

	e.POST(api.WebhookPath, echo.WrapHandler(cfg.API.WebhookHandler()),
		func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c *echo.Context) error {
				if resp, ok := cfg.API.ReadWebhook(c.Request()); !ok {
					api.WriteResponse(c.Response(), resp)
					return nil
				}
				return next(c)
			}
		},
		echoV5TxSlot,
		idemecho.Middleware(cfg.Engine,
			idemecho.WithKey(func(c *echo.Context) (string, bool) { return webhookID(c.Request().Header.Get) }),
			idemecho.WithScope(func(*echo.Context) string { return webhookScope() })),
	)
	v1 := e.Group("/v1",
		func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c *echo.Context) error {
				if _, ok := api.Account(c.Request().Header.Get("Authorization")); !ok {
					api.WriteResponse(c.Response(), cfg.API.Unauthorized())
					return nil
				}
				return next(c)
			}
		},
		echoV5TxSlot,
		idemecho.Middleware(cfg.Engine, idemecho.WithScope(func(c *echo.Context) string {
			return scope(c.Request().Header.Get("Authorization"))
		})),
	)
	v1.Any("/*", echo.WrapHandler(apiHandler(cfg)))
	return e
}

// echoV5TxSlot gives the request a transaction slot (gormstore.WithTxSlot).
func echoV5TxSlot(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		ctx, done := gormstore.WithTxSlot(c.Request().Context())
		defer done()
		c.SetRequest(c.Request().WithContext(ctx))
		return next(c)
	}
}
