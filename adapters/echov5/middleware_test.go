package idemecho_test

import (
	"bufio"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	idemecho "github.com/idemkit/idemkit/adapters/echov5"
	"github.com/idemkit/idemkit/adapters/internal/echocore/echotest"
	"github.com/labstack/echo/v5"
	"github.com/labstack/echo/v5/middleware"
)

// The adapter's tests are the suite both Echo adapters run
// (adapters/internal/echocore/echotest), on Echo v5.
func TestAdapter(t *testing.T) { echotest.Run(t, adapter) }

var adapter = &echotest.Adapter[*echo.Context, echo.HandlerFunc, echo.MiddlewareFunc, idemecho.Option]{
	Middleware: idemecho.Middleware,
	WithScope:  idemecho.WithScope,
	WithKey:    idemecho.WithKey,
	// A middleware.Skipper, as Echo's own middleware configs take.
	WithSkipper: func(skip func(*echo.Context) bool) idemecho.Option {
		return idemecho.WithSkipper(middleware.Skipper(skip))
	},

	New:         newEcho,
	Recover:     middleware.Recover,
	BodyLimit:   middleware.BodyLimit,
	WrapHandler: echo.WrapHandler,
	// Echo v5 has no Timeout middleware that runs the handler on a
	// goroutine of its own (its ContextTimeout only sets a deadline), but
	// net/http's http.TimeoutHandler can be registered through
	// echo.WrapMiddleware.
	TimeoutInside: func(d time.Duration, msg string) echo.MiddlewareFunc {
		return echo.WrapMiddleware(func(next http.Handler) http.Handler { return http.TimeoutHandler(next, d, msg) })
	},

	Response: (*echo.Context).Response,
	// Echo's Gzip sets its writer with c.SetResponse.
	Writer:    (*echo.Context).Response,
	SetWriter: (*echo.Context).SetResponse,
	Status: func(c *echo.Context) int {
		if r, err := echo.UnwrapResponse(c.Response()); err == nil {
			return r.Status
		}
		return 0
	},
	Committed: func(c *echo.Context) bool {
		r, err := echo.UnwrapResponse(c.Response())
		return err == nil && r.Committed
	},
	Flush: func(c *echo.Context) error { return http.NewResponseController(c.Response()).Flush() },
	Hijack: func(c *echo.Context) (net.Conn, *bufio.ReadWriter, error) {
		return http.NewResponseController(c.Response()).Hijack()
	},
	BindBody:        echo.BindBody,
	NewHTTPError:    func(code int, msg string) error { return echo.NewHTTPError(code, msg) },
	StatusCode:      echo.StatusCode,
	ErrNotFound:     echo.ErrNotFound,
	ErrUnauthorized: echo.ErrUnauthorized,
}

// app is an Echo v5 app as the suite uses it.
type app struct{ *echo.Echo }

// newEcho is echo.New with its logger, where the error handler reports the
// suite's expected panics, silenced.
func newEcho() echotest.App[*echo.Context, echo.HandlerFunc, echo.MiddlewareFunc] {
	ec := echo.New()
	ec.Logger = slog.New(slog.DiscardHandler)
	return app{ec}
}

func (a app) OnError(f func(*echo.Context, error)) { a.HTTPErrorHandler = f }

func (a app) POST(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	a.Echo.POST(path, h, m...)
}
func (a app) Any(path string, h echo.HandlerFunc) { a.Echo.Any(path, h) }

func (a app) Group(prefix string, m ...echo.MiddlewareFunc) echotest.Group[*echo.Context, echo.HandlerFunc, echo.MiddlewareFunc] {
	return group{a.Echo.Group(prefix, m...)}
}

type group struct{ *echo.Group }

func (g group) POST(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	g.Group.POST(path, h, m...)
}
