package idemecho_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	idemecho "github.com/idemkit/idemkit/adapters/echo"
	"github.com/idemkit/idemkit/adapters/internal/echocore/echotest"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
)

// The adapter's tests are the suite both Echo adapters run
// (adapters/internal/echocore/echotest), on Echo v4.
func TestAdapter(t *testing.T) { echotest.Run(t, adapter) }

var adapter = &echotest.Adapter[echo.Context, echo.HandlerFunc, echo.MiddlewareFunc, idemecho.Option]{
	Middleware: idemecho.Middleware,
	WithScope:  idemecho.WithScope,
	WithKey:    idemecho.WithKey,
	// A middleware.Skipper, as Echo's own middleware configs take.
	WithSkipper: func(skip func(echo.Context) bool) idemecho.Option {
		return idemecho.WithSkipper(middleware.Skipper(skip))
	},

	New:         newEcho,
	Recover:     middleware.Recover,
	BodyLimit:   func(n int64) echo.MiddlewareFunc { return middleware.BodyLimit(fmt.Sprint(n)) },
	WrapHandler: echo.WrapHandler,
	// Echo v4's Timeout runs the handler on a goroutine of its own.
	// Deprecated in Echo for that reason, it is still in use: the suite
	// checks that the key stays locked under it.
	TimeoutInside: func(d time.Duration, msg string) echo.MiddlewareFunc {
		//lint:ignore SA1019 the deprecated middleware is what the test is about
		return middleware.TimeoutWithConfig(middleware.TimeoutConfig{Timeout: d, ErrorMessage: msg})
	},

	Response: func(c echo.Context) http.ResponseWriter { return c.Response() },
	// Past echo.Response, which takes any status for the final one.
	Writer:    func(c echo.Context) http.ResponseWriter { return c.Response().Writer },
	SetWriter: func(c echo.Context, w http.ResponseWriter) { c.Response().Writer = w },
	Status:    func(c echo.Context) int { return c.Response().Status },
	Committed: func(c echo.Context) bool { return c.Response().Committed },
	Flush:     func(c echo.Context) error { c.Response().Flush(); return nil },
	Hijack:    func(c echo.Context) (net.Conn, *bufio.ReadWriter, error) { return c.Response().Hijack() },
	BindBody:  (&echo.DefaultBinder{}).BindBody,
	NewHTTPError: func(code int, msg string) error {
		if msg == "" {
			return echo.NewHTTPError(code)
		}
		return echo.NewHTTPError(code, msg)
	},
	StatusCode: func(err error) int {
		if he := (*echo.HTTPError)(nil); errors.As(err, &he) {
			return he.Code
		}
		return 0
	},
	ErrNotFound:     echo.ErrNotFound,
	ErrUnauthorized: echo.ErrUnauthorized,
}

// app is an Echo v4 app as the suite uses it.
type app struct{ *echo.Echo }

// newEcho is echo.New with its logger, where Recover prints the suite's
// expected panics, silenced.
func newEcho() echotest.App[echo.Context, echo.HandlerFunc, echo.MiddlewareFunc] {
	ec := echo.New()
	ec.Logger.SetOutput(io.Discard)
	return app{ec}
}

func (a app) OnError(f func(echo.Context, error)) {
	a.HTTPErrorHandler = func(err error, c echo.Context) { f(c, err) }
}

func (a app) POST(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	a.Echo.POST(path, h, m...)
}
func (a app) Any(path string, h echo.HandlerFunc) { a.Echo.Any(path, h) }

func (a app) Group(prefix string, m ...echo.MiddlewareFunc) echotest.Group[echo.Context, echo.HandlerFunc, echo.MiddlewareFunc] {
	return group{a.Echo.Group(prefix, m...)}
}

type group struct{ *echo.Group }

func (g group) POST(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	g.Group.POST(path, h, m...)
}
