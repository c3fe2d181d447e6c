// Package fibertest is the test suite both Fiber adapters run, beyond the
// HTTP conformance suite (idemtest.TestMiddleware, which Run runs too):
// registration with app.Use, a group or a route; a handler's errors
// rendered by the app's error handler; streamed and hijacked responses;
// panics; bodies read, streamed and parsed as multipart forms; fasthttp's
// reused buffers; Fiber's body limit; the Content-Type fasthttp adds. It
// is written once against an Adapter, which mounts the adapter on its own
// major of Fiber: the cases are the same for Fiber v2 and v3, and a case
// added here runs for both.
//
// It is internal to the adapters, like the middleware it tests.
package fibertest

import (
	"context"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/idemkit/idemkit/adapters/internal/fasthttpcore"
	idem "github.com/idemkit/idemkit/core"
)

// Ctx is what the suite's handlers use of a request's Fiber context:
// methods that Fiber v2's *fiber.Ctx and Fiber v3's fiber.Ctx both have,
// with the same signatures, so that either is a Ctx as it is.
type Ctx interface {
	fasthttpcore.Ctx
	Get(key string, defaultValue ...string) string
	Set(key, val string)
	Params(key string, defaultValue ...string) string
	Body() []byte
	FormFile(key string) (*multipart.FileHeader, error)
	FormValue(key string, defaultValue ...string) string
	Send(body []byte) error
	SendString(body string) error
	SendStream(stream io.Reader, size ...int) error
	JSON(data any, ctype ...string) error
}

// Adapter is one major of Fiber with its idemkit adapter, for the suite:
// C is the major's context type and O the adapter's Option.
type Adapter[C Ctx, O any] struct {
	// The adapter's API, as it is: New, WithScope, WithKey, WithNext and
	// ErrorHandler.
	New          func(*idem.Engine, ...O) func(C) error
	WithScope    func(func(C) string) O
	WithKey      func(func(C) (string, bool)) O
	WithNext     func(func(C) bool) O
	ErrorHandler func(*idem.Engine, func(C, error) error) func(C, error) error

	// NewApp returns a new app configured by cfg.
	NewApp func(cfg Config[C]) App[C]
	// Recover is Fiber's recover middleware (recover.New()), and
	// HTTPHandler its adaptor for a net/http handler
	// (adaptor.HTTPHandler).
	Recover     func() func(C) error
	HTTPHandler func(http.Handler) func(C) error
	// Context is the context.Context a handler runs with (c.UserContext in
	// Fiber v2, c.Context in v3); RequestCtx is c's fasthttp.RequestCtx.
	Context    func(C) context.Context
	RequestCtx func(C) *fasthttp.RequestCtx
	// Bind decodes the request body into v (c.BodyParser in Fiber v2,
	// c.Bind().Body in v3), and SendFile sends a file (c.SendFile).
	Bind     func(c C, v any) error
	SendFile func(c C, name string) error
	// NewError is fiber.NewError; ErrorCode reports the code of the
	// *fiber.Error in err's chain, if there is one.
	NewError  func(code int, message ...string) error
	ErrorCode func(err error) (int, bool)

	// JSONType is the Content-Type of c.JSON's responses,
	// DefaultBodyLimit is fiber.DefaultBodyLimit, and NotFound the body of
	// the answer of Fiber's default error handler to a request for path
	// that matches no route.
	JSONType         string
	DefaultBodyLimit int
	NotFound         func(method, path string) string
}

// Config is the part of fiber.Config the suite sets.
type Config[C Ctx] struct {
	ErrorHandler                 func(C, error) error // nil: Fiber's default
	StreamRequestBody            bool
	DisablePreParseMultipartForm bool
}

// App is a Fiber app, as the suite uses it.
type App[C Ctx] interface {
	Router[C]
	Use(handler func(C) error)
	All(path string, handlers ...func(C) error)
	Group(prefix string, handlers ...func(C) error) Router[C]
	// Handler is app.Handler(): the app as a fasthttp.RequestHandler.
	Handler() fasthttp.RequestHandler
	// Test is app.Test with a timeout of 10 s.
	Test(req *http.Request) (*http.Response, error)
	// Serve is app.Listener, with no startup message; ShutdownWithTimeout
	// is app.ShutdownWithTimeout.
	Serve(ln net.Listener) error
	ShutdownWithTimeout(timeout time.Duration) error
}

// Router registers routes: an app, or a group of one.
type Router[C Ctx] interface {
	Post(path string, handlers ...func(C) error)
}

// Listen serves app on a fresh 127.0.0.1 port until the test ends, and
// returns its URL.
func Listen[C Ctx](tb testing.TB, app App[C]) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- app.Serve(ln) }()
	tb.Cleanup(func() {
		if err := app.ShutdownWithTimeout(15 * time.Second); err != nil {
			tb.Error(err)
		}
		if err := <-served; err != nil {
			tb.Error(err)
		}
	})
	return "http://" + ln.Addr().String()
}

// Run runs the suite for a, each case a subtest named after it.
func Run[C Ctx, O any](t *testing.T, a *Adapter[C, O]) {
	s := &suite[C, O]{a}
	for _, c := range []struct {
		name string
		test func(*testing.T)
	}{
		{"Conformance", s.conformance},
		{"KeyFunc", s.keyFunc},
		{"Next", s.next},
		{"UnmatchedRoutes", s.unmatchedRoutes},
		{"Registration", s.registration},
		{"ErrorHandler", s.errorHandler},
		{"StreamedNotStored", s.streamedNotStored},
		{"HijackedNotStored", s.hijackedNotStored},
		{"PanicReleasesKey", s.panicReleasesKey},
		{"Body", s.body},
		{"MultipartForm", s.multipartForm},
		{"BuffersReused", s.buffersReused},
		{"RequestRewritten", s.requestRewritten},
		{"BodyLimitProblem", s.bodyLimitProblem},
		{"ReplayContentType", s.replayContentType},
	} {
		t.Run(c.name, c.test)
	}
}

// suite holds the adapter the cases run against.
type suite[C Ctx, O any] struct{ a *Adapter[C, O] }

// status sets the status of c's response, as c.Status does.
func status[C Ctx](c C, code int) C {
	c.Response().SetStatusCode(code)
	return c
}
