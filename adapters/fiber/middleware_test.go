package idemfiber_test

import (
	"errors"
	"net"
	"net/http"
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/gofiber/fiber/v2/middleware/recover"

	idemfiber "github.com/idemkit/idemkit/adapters/fiber"
	"github.com/idemkit/idemkit/adapters/internal/fasthttpcore/fibertest"
)

// The adapter's tests are the suite both Fiber adapters run
// (adapters/internal/fasthttpcore/fibertest), on Fiber v2.
func TestAdapter(t *testing.T) { fibertest.Run(t, adapter) }

var adapter = &fibertest.Adapter[*fiber.Ctx, idemfiber.Option]{
	New:          idemfiber.New,
	WithScope:    idemfiber.WithScope,
	WithKey:      idemfiber.WithKey,
	WithNext:     idemfiber.WithNext,
	ErrorHandler: idemfiber.ErrorHandler,

	NewApp:      newApp,
	Recover:     func() fiber.Handler { return recover.New() },
	HTTPHandler: adaptor.HTTPHandler,
	Context:     (*fiber.Ctx).UserContext,
	RequestCtx:  (*fiber.Ctx).Context,
	Bind:        (*fiber.Ctx).BodyParser,
	SendFile:    func(c *fiber.Ctx, name string) error { return c.SendFile(name) },
	NewError:    func(code int, message ...string) error { return fiber.NewError(code, message...) },
	ErrorCode: func(err error) (int, bool) {
		if fe := (*fiber.Error)(nil); errors.As(err, &fe) {
			return fe.Code, true
		}
		return 0, false
	},

	JSONType:         fiber.MIMEApplicationJSON,
	DefaultBodyLimit: fiber.DefaultBodyLimit,
	NotFound:         func(method, path string) string { return "Cannot " + method + " " + path },
}

// app is a Fiber v2 app as the suite uses it.
type app struct{ *fiber.App }

// quietLogger silences fasthttp's log lines for the suite's expected panics.
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

func newApp(cfg fibertest.Config[*fiber.Ctx]) fibertest.App[*fiber.Ctx] {
	a := fiber.New(fiber.Config{
		DisableStartupMessage:        true,
		ErrorHandler:                 cfg.ErrorHandler,
		StreamRequestBody:            cfg.StreamRequestBody,
		DisablePreParseMultipartForm: cfg.DisablePreParseMultipartForm,
	})
	a.Server().Logger = quietLogger{}
	return app{a}
}

func (a app) Use(h fiber.Handler)                            { a.App.Use(h) }
func (a app) Post(path string, hs ...fiber.Handler)          { a.App.Post(path, hs...) }
func (a app) All(path string, hs ...fiber.Handler)           { a.App.All(path, hs...) }
func (a app) Test(req *http.Request) (*http.Response, error) { return a.App.Test(req, 10_000) }
func (a app) Serve(ln net.Listener) error                    { return a.Listener(ln) }

func (a app) Group(prefix string, hs ...fiber.Handler) fibertest.Router[*fiber.Ctx] {
	return group{a.App.Group(prefix, hs...)}
}

type group struct{ fiber.Router }

func (g group) Post(path string, hs ...fiber.Handler) { g.Router.Post(path, hs...) }
