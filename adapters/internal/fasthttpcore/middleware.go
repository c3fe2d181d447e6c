// Package fasthttpcore is the middleware of both Fiber adapters
// (adapters/fiber for Fiber v2, adapters/fiberv3 for Fiber v3), written
// once. Both majors run on fasthttp and give a handler the same request
// and response (*fasthttp.Request, *fasthttp.Response), so everything
// idemkit does with them is here: the exchange.Request built from the request,
// copied out of fasthttp's reused buffers; a multipart form written out
// the same way for every retry; the handler run under the lock, its error
// rendered inside the capture; the response recorded, or withheld when
// exchange.Finished says so; a decision written to the response; and the
// route table that tells a request matching no route. An adapter only
// translates its Fiber's context: a Framework value says how.
//
// It is internal to the adapters: Go's internal rule goes by import path,
// so the adapter modules under github.com/idemkit/idemkit/adapters/ may
// import it, and nothing else may.
package fasthttpcore

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/valyala/fasthttp"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// Ctx is what the middleware uses of a request's Fiber context: methods
// that Fiber v2's *fiber.Ctx and Fiber v3's fiber.Ctx both have, with the
// same signatures.
type Ctx interface {
	Method(override ...string) string
	Path(override ...string) string
	Request() *fasthttp.Request
	Response() *fasthttp.Response
	Next() error
	SendStatus(status int) error
}

// Framework is what differs between the Fiber majors, for their context
// type C.
type Framework[C Ctx] struct {
	// Context and SetContext get and set the context.Context a handler
	// reads (c.UserContext in Fiber v2, c.Context in v3): the handler runs
	// with the lock's.
	Context    func(C) context.Context
	SetContext func(C, context.Context)
	// RequestCtx is the fasthttp.RequestCtx that c serves.
	RequestCtx func(C) *fasthttp.RequestCtx
	// ErrorHandler renders err with the app's error handler.
	ErrorHandler func(C, error) error
	// Abandoned reports whether a timeout middleware inside idemkit
	// answered and left the handler running with c (Fiber v3's
	// c.IsAbandoned); nil for a Fiber that cannot.
	Abandoned func(C) bool
	// Handlers is the number of handlers of c's app (App.HandlersCount),
	// which grows with every route added.
	Handlers func(C) uint32
	// Routes calls add with the method and path of every route of c's app
	// that is not middleware (App.GetRoutes(true)).
	Routes func(c C, add func(method, path string))
	// Routing reports how c's app compares paths: whether case matters
	// (fiber.Config.CaseSensitive) and whether a trailing slash does
	// (StrictRouting).
	Routing func(C) (caseSensitive, strict bool)
	// Match reports whether path matches the pattern of a route with
	// parameters or wildcards, under that routing
	// (fiber.RoutePatternMatch).
	Match func(path, pattern string, caseSensitive, strict bool) bool
	// BodyLimit is the body limit fasthttp enforces for c's app
	// (fiber.Config.BodyLimit), and ErrBodyLimit the error Fiber reports
	// for a body over it (fiber.ErrRequestEntityTooLarge).
	BodyLimit    func(C) int
	ErrBodyLimit error
	// DefaultErrorHandler is fiber.DefaultErrorHandler.
	DefaultErrorHandler func(C, error) error
}

// Options are what the adapter's options (WithScope, WithKey, WithNext)
// set; a nil one is not set.
type Options[C Ctx] struct {
	Scope func(C) string
	Key   func(C) (string, bool)
	Next  func(C) bool
}

// Apply returns the options that opts, an adapter's Options, set.
func Apply[T any, O ~func(*T)](opts []O) T {
	var o T
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Middleware is the adapters' New: a Fiber handler that runs every request
// through e.
func Middleware[C Ctx](e *idem.Engine, f *Framework[C], o Options[C]) func(C) error {
	a := e.Adapter()
	keyHeader := a.HeaderName()
	known := &routes[C]{f: f}
	return func(c C) error {
		if !a.Guards(c.Method()) || !known.match(c) || o.Next != nil && o.Next(c) {
			// Unguarded methods, requests that match no route (Fiber's 404
			// and 405, which app.Use middleware also sees) and skipped
			// requests pass untouched.
			return c.Next()
		}
		r := c.Request()
		req := newRequest(r, c.Method(), keyHeader)
		if o.Key != nil {
			req.KeyLines = nil
			if key, ok := o.Key(c); ok {
				req.KeyLines = []string{strings.Clone(key)}
			}
		}
		if o.Scope != nil {
			req.Scope = strings.Clone(o.Scope(c)) // scopes usually come from c.Get, which aliases
		}
		ctx := f.Context(c)
		d := a.Begin(ctx, req)
		if d.Body != nil {
			r.SetBodyRaw(d.Body) // Begin consumed the stream; d.Body is ours to hand on
		}
		switch d.Action {
		case exchange.Respond:
			respond(c.Response(), &d.Response, d.Replayed)
			return nil
		case exchange.Run:
			return run(c, e, f, d.Lock)
		default:
			return c.Next()
		}
	}
}

// run runs the rest of the chain under lock and records what it answered.
func run[C Ctx](c C, e *idem.Engine, f *Framework[C], lock exchange.Lock) error {
	ctx := f.Context(c)
	f.SetContext(c, lock.Context())
	defer func() {
		if p := recover(); p != nil {
			f.SetContext(c, ctx)
			_ = lock.Abandon(ctx, exchange.ReasonPanic)
			panic(p) // for the recover middleware, which answers 500
		}
	}()
	err := c.Next()
	if f.Abandoned != nil && f.Abandoned(c) && ctx.Err() == nil {
		// A timeout inside idemkit (Fiber v3's timeout middleware wraps a
		// route's handler, so it always is when idemkit is registered with
		// app.Use or on a group) answered and left the handler running on a
		// goroutine of its own, which may still use c: leave c to it, and
		// the error to Fiber, as without idemkit; the key stays locked for a
		// lease (see exchange.Lock.LeaveRunning). It was a timeout inside only
		// if the context idemkit received is still live: one registered
		// before idemkit gives up when that context ends, and then runs
		// idemkit and the handler on its own goroutine, so when the chain
		// returns here the handler has ended, and its answer is recorded.
		lock.LeaveRunning(ctx, http.StatusRequestTimeout, "Fiber's timeout middleware")
		return err
	}
	f.SetContext(c, ctx) // middleware outside idemkit sees the context it passed on
	if err != nil {
		// As Fiber itself does, but here, so the error page is what gets stored.
		if err := f.ErrorHandler(c, err); err != nil {
			_ = c.SendStatus(http.StatusInternalServerError)
		}
	}
	finish(ctx, e, lock, c.Response(), f.RequestCtx(c).Hijacked())
	return nil
}

// finish records resp, the response the handler wrote under lock, or
// abandons the key if resp is streamed or the connection was hijacked;
// and withholds resp where the outcome says it must not go out
// (exchange.Finished.Withhold).
func finish(ctx context.Context, e *idem.Engine, lock exchange.Lock, resp *fasthttp.Response, hijacked bool) {
	if resp.IsBodyStream() || hijacked {
		if lock.Abandon(ctx, exchange.ReasonStreamed).Withhold() && !hijacked {
			withhold(e, resp)
		}
		return
	}
	_, _ = lock.Write(resp.Body()) // Write copies
	if lock.Finish(ctx, resp.StatusCode(), (*responseHeader)(resp)).Withhold() {
		withhold(e, resp)
	}
}

// ErrorHandler is the adapters' ErrorHandler: it answers f.ErrBodyLimit,
// which Fiber reports for a body over its own limit, with e's 413
// payload-too-large problem, and passes every other error to next, or to
// f.DefaultErrorHandler if next is nil.
func ErrorHandler[C Ctx](e *idem.Engine, f *Framework[C], next func(C, error) error) func(C, error) error {
	if next == nil {
		next = f.DefaultErrorHandler
	}
	return func(c C, err error) error {
		if !errors.Is(err, f.ErrBodyLimit) {
			return next(c, err)
		}
		limit := f.BodyLimit(c) // BodyLimit, as fasthttp enforces it
		if limit <= 0 {
			limit = fasthttp.DefaultMaxRequestBodySize
		}
		problem := e.Adapter().BodyTooLarge(int64(limit))
		respond(c.Response(), &problem, false)
		return nil
	}
}
