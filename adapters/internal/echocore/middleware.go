// Package echocore is the middleware of both Echo adapters (adapters/echo
// for Echo v4, adapters/echov5 for Echo v5), written once. Both majors
// serve net/http requests, and idemkit's net/http work (reading the
// request, capturing the response, finishing) is the core's
// (exchange.ResponseCapture); what is left, and is here, is the flow around
// it: which requests pass untouched, the options, a body refused by Echo's
// BodyLimit, the capture put in the response chain and taken out again, a
// handler's error rendered inside it. An adapter only translates its
// Echo's context: a Framework value says how.
//
// It is internal to the adapters: Go's internal rule goes by import path,
// so the adapter modules under github.com/idemkit/idemkit/adapters/ may
// import it, and nothing else may.
package echocore

import (
	"io"
	"net/http"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// Ctx is what the middleware uses of a request's Echo context: methods
// that Echo v4's echo.Context and Echo v5's *echo.Context both have.
type Ctx interface {
	Request() *http.Request
	SetRequest(r *http.Request)
}

// Framework is what differs between the Echo majors, for their context
// type C.
type Framework[C Ctx] struct {
	// Unrouted reports whether c matched no route: middleware added with
	// e.Use runs for those too, and their 404 or 405 is not guarded.
	Unrouted func(C) bool
	// StatusCode is the status of an *echo.HTTPError in err's chain, or 0.
	StatusCode func(err error) int
	// Response is c's response, as a handler writes it: a decision goes
	// there.
	Response func(C) http.ResponseWriter
	// Writer is the writer that the capture of a handler's response takes
	// the place of, and SetWriter puts another in that place.
	Writer    func(C) http.ResponseWriter
	SetWriter func(C, http.ResponseWriter)
	// Informational, if not nil, is the writer below Echo's Response, for
	// the informational statuses (103 Early Hints) a handler sends when
	// the capture sits above Echo's Response, which would take the first
	// status it is given for the final one and drop the real one after it.
	Informational func(C) http.ResponseWriter
	// RenderError renders err with the app's HTTPErrorHandler.
	RenderError func(C, error)
}

// Options are what the adapter's options (WithScope, WithKey,
// WithSkipper) set; a nil one is not set.
type Options[C Ctx] struct {
	Scope func(C) string
	Key   func(C) (string, bool)
	Skip  func(C) bool
}

// Apply returns the options that opts, an adapter's Options, set.
func Apply[T any, O ~func(*T)](opts []O) T {
	var o T
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Middleware is the adapters' Middleware: Echo middleware that runs every
// request through e. H is the major's HandlerFunc.
func Middleware[C Ctx, H ~func(C) error](e *idem.Engine, f *Framework[C], o Options[C]) func(next H) H {
	m := &middleware[C, H]{e, f, o}
	// Echo v4 wraps a handler in the middleware of e.Use for every request:
	// the closure holds only m and next.
	return func(next H) H {
		return func(c C) error { return m.serve(c, next) }
	}
}

type middleware[C Ctx, H ~func(C) error] struct {
	e *idem.Engine
	f *Framework[C]
	o Options[C]
}

func (m *middleware[C, H]) serve(c C, next H) error {
	e, f, o := m.e.Adapter(), m.f, m.o
	r := c.Request()
	if !e.Guards(r.Method) || f.Unrouted(c) || o.Skip != nil && o.Skip(c) {
		return next(c)
	}
	req := e.HTTPRequest(r)
	if req.BodyReader != nil {
		req.BodyReader = bodyLimitReader{req.BodyReader, f.StatusCode}
	}
	if o.Key != nil {
		req.KeyLines = nil
		if key, ok := o.Key(c); ok {
			req.KeyLines = []string{key}
		}
	}
	if o.Scope != nil {
		req.Scope = o.Scope(c)
	}
	d := e.Begin(r.Context(), req)
	switch d.Action {
	case exchange.Respond:
		d.WriteTo(f.Response(c))
		return nil
	case exchange.Run:
		return serveLocked(c, next, f, d)
	default:
		d.SetBody(r)
		return next(c)
	}
}

// bodyLimitReader reports Echo's BodyLimit middleware, registered before
// idemkit, refusing a body (chunked ones are only found too large while
// read) as idem.ErrBodyTooLarge, so the client gets 413 payload-too-large
// like any other oversized body.
type bodyLimitReader struct {
	io.Reader
	statusCode func(error) int
}

func (r bodyLimitReader) Read(p []byte) (int, error) {
	n, err := r.Reader.Read(p)
	if err != nil && err != io.EOF && r.statusCode(err) == http.StatusRequestEntityTooLarge {
		err = idem.ErrBodyTooLarge
	}
	return n, err
}

func serveLocked[C Ctx, H ~func(C) error](c C, next H, f *Framework[C], d exchange.Decision) error {
	lock, ctx, orig := d.Lock, c.Request().Context(), f.Writer(c)
	x := new(captureWriter) // one allocation for the writer and the body
	x.Reset(orig, lock)
	x.SetRequestBody(c.Request(), d.Body)
	if f.Informational != nil {
		x.informational = f.Informational(c)
	}
	// Echo's Response and the middleware registered before idemkit see the
	// response as usual, whether the capture is below Echo's Response or
	// above it.
	f.SetWriter(c, x)
	req := c.Request()
	c.SetRequest(req.WithContext(lock.Context()))
	defer lock.AbandonOnPanic(ctx)
	defer func() {
		if !lock.HandlerMayRun() {
			// Writes after ours, such as the 500 of a recovered panic, are
			// not captured, and middleware outside idemkit sees the request
			// it passed on. Not while a timeout's goroutine may still run
			// the handler with this context.
			f.SetWriter(c, orig)
			c.SetRequest(req)
		}
	}()
	if err := next(c); err != nil {
		// Rendered here, the error response is captured like any other.
		// The error is then handled: returning it would render it twice.
		f.RenderError(c, err)
	}
	x.End(ctx, x.Status())
	return nil
}

// captureWriter is the shared capture (exchange.ResponseCapture), with the
// informational statuses a handler sends passed to the writer below Echo's
// Response where there is one (Framework.Informational).
type captureWriter struct {
	exchange.ResponseCapture
	informational http.ResponseWriter
}

func (w *captureWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols && w.informational != nil {
		w.informational.WriteHeader(code)
		return
	}
	w.ResponseCapture.WriteHeader(code)
}
