// Package echotest is the test suite both Echo adapters run, beyond the
// HTTP conformance suites of core/idemtest (which Run runs too):
// registration with Use, on a group or on a route; a handler's errors
// rendered by the app's HTTPErrorHandler; streamed and hijacked responses;
// panics; binding; tenant scopes; 103 Early Hints; the writers of the
// middleware around idemkit; Echo's BodyLimit; and a timeout inside
// idemkit. It is written once against an Adapter, which mounts the
// adapter on its own major of Echo: the cases are the same for Echo v4 and
// v5, and a case added here runs for both.
//
// It is internal to the adapters, like the middleware it tests.
package echotest

import (
	"bufio"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemkit/idemkit/adapters/internal/echocore"
	idem "github.com/idemkit/idemkit/core"
)

// Ctx is what the suite's handlers use of a request's Echo context:
// methods that Echo v4's echo.Context and Echo v5's *echo.Context both
// have, with the same signatures.
type Ctx interface {
	echocore.Ctx
	JSON(code int, i any) error
	Bind(i any) error
	Get(key string) any
	Set(key string, val any)
	NoContent(code int) error
}

// Adapter is one major of Echo with its idemkit adapter, for the suite: C
// is the major's context type, H its HandlerFunc, M its MiddlewareFunc
// and O the adapter's Option.
type Adapter[C Ctx, H ~func(C) error, M ~func(H) H, O any] struct {
	// The adapter's API, as it is: Middleware, WithScope, WithKey and
	// WithSkipper.
	Middleware  func(*idem.Engine, ...O) M
	WithScope   func(func(C) string) O
	WithKey     func(func(C) (string, bool)) O
	WithSkipper func(func(C) bool) O

	// New returns echo.New with its logger silenced.
	New func() App[C, H, M]
	// Recover, BodyLimit and WrapHandler are Echo's (middleware.Recover,
	// middleware.BodyLimit, echo.WrapHandler); TimeoutInside is a
	// middleware that answers when timeout is up, with message, and leaves
	// the handler running on a goroutine of its own (Echo v4's Timeout;
	// http.TimeoutHandler through echo.WrapMiddleware in v5).
	Recover       func() M
	BodyLimit     func(bytes int64) M
	WrapHandler   func(http.Handler) H
	TimeoutInside func(timeout time.Duration, message string) M

	// Response is c.Response(); Writer and SetWriter get and set the
	// writer a middleware with a writer of its own (a gzip one) wraps
	// (c.Response().Writer in Echo v4, c.Response() and c.SetResponse in
	// v5), which is also where a handler sends a 103 Early Hints.
	Response  func(C) http.ResponseWriter
	Writer    func(C) http.ResponseWriter
	SetWriter func(C, http.ResponseWriter)
	// Status and Committed are what Echo's Response says of c's response.
	Status    func(C) int
	Committed func(C) bool
	// Flush and Hijack flush and take over c's response.
	Flush  func(C) error
	Hijack func(C) (net.Conn, *bufio.ReadWriter, error)
	// BindBody binds the body alone (Echo's DefaultBinder.BindBody).
	BindBody func(c C, v any) error
	// NewHTTPError is echo.NewHTTPError, with Echo's message for the code
	// when message is empty; StatusCode is the code of the *echo.HTTPError
	// in err's chain, or 0; ErrNotFound and ErrUnauthorized are Echo's.
	NewHTTPError    func(code int, message string) error
	StatusCode      func(err error) int
	ErrNotFound     error
	ErrUnauthorized error
}

// App is an Echo app, as the suite uses it.
type App[C Ctx, H ~func(C) error, M ~func(H) H] interface {
	http.Handler
	Group[C, H, M]
	Any(path string, h H)
	Group(prefix string, m ...M) Group[C, H, M]
	// OnError sets the app's HTTPErrorHandler.
	OnError(func(C, error))
}

// Group registers middleware and routes: an app, or a group of one.
type Group[C Ctx, H ~func(C) error, M ~func(H) H] interface {
	Use(m ...M)
	POST(path string, h H, m ...M)
}

// Serve serves h on a loopback listener until the test ends, and returns
// its URL.
func Serve(tb testing.TB, h http.Handler) string {
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Start()
	tb.Cleanup(srv.Close)
	return srv.URL
}

// Run runs the suite for a, each case a subtest named after it.
func Run[C Ctx, H ~func(C) error, M ~func(H) H, O any](t *testing.T, a *Adapter[C, H, M, O]) {
	s := &suite[C, H, M, O]{a}
	for _, c := range []struct {
		name string
		test func(*testing.T)
	}{
		{"Conformance", s.conformance},
		{"KeyFunc", s.keyFunc},
		{"ResponseWriter", s.responseWriter},
		{"Skipper", s.skipper},
		{"UnmatchedRoutes", s.unmatchedRoutes},
		{"HTTP2StreamReset", s.http2StreamReset},
		{"Registration", s.registration},
		{"Errors", s.errors},
		{"Streaming", s.streaming},
		{"Panic", s.panics},
		{"Binding", s.binding},
		{"Scope", s.scope},
		{"EarlyHints", s.earlyHints},
		{"OuterWriterRestored", s.outerWriterRestored},
		{"BodyLimitIs413", s.bodyLimitIs413},
	} {
		t.Run(c.name, c.test)
	}
}

// suite holds the adapter the cases run against.
type suite[C Ctx, H ~func(C) error, M ~func(H) H, O any] struct {
	a *Adapter[C, H, M, O]
}
