package idemfiber_test

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/fiber/v3/middleware/adaptor"
	"github.com/gofiber/fiber/v3/middleware/recover"

	idemfiber "github.com/idemkit/idemkit/adapters/fiberv3"
	"github.com/idemkit/idemkit/adapters/internal/fasthttpcore/fibertest"
)

// The adapter's tests are the suite both Fiber adapters run
// (adapters/internal/fasthttpcore/fibertest), on Fiber v3, and the tests
// of Fiber v3's timeout middleware (timeout_test.go).
func TestAdapter(t *testing.T) { fibertest.Run(t, adapter) }

var adapter = &fibertest.Adapter[fiber.Ctx, idemfiber.Option]{
	New:          idemfiber.New,
	WithScope:    idemfiber.WithScope,
	WithKey:      idemfiber.WithKey,
	WithNext:     idemfiber.WithNext,
	ErrorHandler: idemfiber.ErrorHandler,

	NewApp: func(cfg fibertest.Config[fiber.Ctx]) fibertest.App[fiber.Ctx] {
		return newApp(fiber.Config{
			ErrorHandler:                 cfg.ErrorHandler,
			StreamRequestBody:            cfg.StreamRequestBody,
			DisablePreParseMultipartForm: cfg.DisablePreParseMultipartForm,
		})
	},
	Recover:     func() fiber.Handler { return recover.New() },
	HTTPHandler: adaptor.HTTPHandler,
	Context:     fiber.Ctx.Context,
	RequestCtx:  fiber.Ctx.RequestCtx,
	Bind:        func(c fiber.Ctx, v any) error { return c.Bind().Body(v) },
	SendFile:    func(c fiber.Ctx, name string) error { return c.SendFile(name) },
	NewError:    func(code int, message ...string) error { return fiber.NewError(code, message...) },
	ErrorCode: func(err error) (int, bool) {
		var fe *fiber.Error
		if errors.As(err, &fe) {
			return fe.Code, true
		}
		return 0, false
	},

	JSONType:         fiber.MIMEApplicationJSONCharsetUTF8,
	DefaultBodyLimit: fiber.DefaultBodyLimit,
	NotFound:         func(string, string) string { return "Not Found" },
}

// app is a Fiber v3 app as the suite uses it.
type app struct{ *fiber.App }

// quiet silences fasthttp's log lines for the suite's expected panics.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

func newApp(cfg fiber.Config) app {
	a := fiber.New(cfg)
	a.Server().Logger = quiet{}
	return app{a}
}

// listen serves a on a loopback port until the test ends.
func listen(tb testing.TB, a *fiber.App) string { return fibertest.Listen(tb, app{a}) }

func (a app) Use(h fiber.Handler)                   { a.App.Use(h) }
func (a app) Post(path string, hs ...fiber.Handler) { a.App.Post(path, hs[0], anys(hs[1:])...) }
func (a app) All(path string, hs ...fiber.Handler)  { a.App.All(path, hs[0], anys(hs[1:])...) }

func (a app) Test(req *http.Request) (*http.Response, error) {
	return a.App.Test(req, fiber.TestConfig{Timeout: 10 * time.Second})
}

func (a app) Serve(ln net.Listener) error {
	return a.Listener(ln, fiber.ListenConfig{DisableStartupMessage: true})
}

func (a app) Group(prefix string, hs ...fiber.Handler) fibertest.Router[fiber.Ctx] {
	return group{a.App.Group(prefix, anys(hs)...)}
}

type group struct{ fiber.Router }

func (g group) Post(path string, hs ...fiber.Handler) { g.Router.Post(path, hs[0], anys(hs[1:])...) }

// anys is hs as the []any Fiber v3's routing methods take.
func anys(hs []fiber.Handler) []any {
	out := make([]any, len(hs))
	for i, h := range hs {
		out[i] = h
	}
	return out
}
