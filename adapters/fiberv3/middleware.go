// Package idemfiber is the Fiber v3 adapter of idemkit: middleware that
// makes POST and PATCH handlers safe to retry. It keeps the name of the
// Fiber v2 adapter's package, as Fiber v3 keeps Fiber's, so moving an
// application from one to the other changes only import paths.
//
//	engine := idem.New(idem.Config{Store: memstore.New()})
//	app := fiber.New(fiber.Config{ErrorHandler: idemfiber.ErrorHandler(engine, nil)})
//	app.Use(recover.New())        // panics release the key, then reach recover
//	app.Use(idemfiber.New(engine)) // or per group or route
//	app.Post("/v1/charges", createCharge)
//
// Fiber runs on fasthttp, which reuses request and response buffers once a
// handler returns. The middleware copies everything idemkit keeps (method,
// path, key, scope, response headers and body) out of those buffers.
//
// The handler runs with the lock's context as c.Context(): idem.HeldKey
// finds the key and owner token in it, and it is cancelled with cause
// idem.ErrLeaseLost if the lease is lost. Register timeout middleware
// before this one, or use idem.Config.HandlerTimeout.
//
// fasthttp refuses a body over fiber.Config.BodyLimit before any
// middleware runs; ErrorHandler, as the app's error handler, answers it
// with idemkit's payload-too-large problem.
package idemfiber

import (
	"bytes"
	"strings"
	"sync"

	"github.com/gofiber/fiber/v3"
	"github.com/gofiber/utils/v2"
	"github.com/valyala/fasthttp"

	idem "github.com/idemkit/idemkit/core"
)

// New returns Fiber middleware that runs every request through e. Register it
// with app.Use, on a group, or on a single route, after the middleware that
// must decide first (recover, authentication, rate limiting).
//
// A handler's error is rendered by the app's ErrorHandler inside the
// middleware, so that the response the client sees is the one stored; the
// middleware then returns nil, and middleware registered before it sees the
// rendered response rather than the error.
func New(e *idem.Engine, opts ...Option) fiber.Handler {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	keyHeader := e.HeaderName()
	var known routes
	return func(c fiber.Ctx) error {
		if !e.Guards(c.Method()) || !known.match(c) || o.next != nil && o.next(c) {
			// Unguarded methods, requests that match no route (Fiber's 404
			// and 405, which app.Use middleware also sees) and skipped
			// requests pass untouched.
			return c.Next()
		}
		r := c.Request()
		req := idem.Request{
			Method:   ownMethod(c.Method()),
			Path:     requestTarget(r),
			KeyLines: ownLines(r.Header.PeekAll(keyHeader)),
			// Only read during Begin, so they may alias fasthttp's buffers.
			ContentType:     utils.UnsafeString(r.Header.ContentType()),
			ContentEncoding: contentEncoding(&r.Header),
		}
		if r.IsBodyStream() { // fiber.Config.StreamRequestBody
			req.BodyReader, req.ContentLength = r.BodyStream(), int64(max(r.Header.ContentLength(), -1))
		} else if boundary := r.Header.MultipartFormBoundary(); len(boundary) > 0 {
			req.Body = formBody(r, string(boundary))
		} else {
			req.Body = r.Body()
		}
		if o.key != nil {
			req.KeyLines = nil
			if key, ok := o.key(c); ok {
				req.KeyLines = []string{strings.Clone(key)}
			}
		}
		if o.scope != nil {
			req.Scope = strings.Clone(o.scope(c)) // scopes usually come from c.Get, which aliases
		}
		ctx := c.Context()
		d := e.Begin(ctx, &req)
		if d.Body != nil {
			r.SetBodyRaw(d.Body) // Begin consumed the stream; d.Body is ours to hand on
		}
		switch d.Action {
		case idem.ActionRespond:
			respond(c.Response(), &d.Response, d.Replayed)
			return nil
		case idem.ActionRun:
			return run(c, e, d.Lock)
		default:
			return c.Next()
		}
	}
}

// run runs the rest of the chain under lock and records what it answered.
func run(c fiber.Ctx, e *idem.Engine, lock *idem.Lock) error {
	ctx := c.Context()
	c.SetContext(lock.Context())
	defer func() {
		if p := recover(); p != nil {
			c.SetContext(ctx)
			_ = lock.Abandon(ctx, idem.ReasonPanic)
			panic(p) // for the recover middleware, which answers 500
		}
	}()
	err := c.Next()
	if c.IsAbandoned() && ctx.Err() == nil {
		// A timeout inside idemkit (Fiber's timeout middleware wraps a
		// route's handler, so it always is when idemkit is registered with
		// app.Use or on a group) answered and left the handler running on a
		// goroutine of its own, which may still use c: leave c to it, and
		// the error to Fiber, as without idemkit; the key stays locked for a
		// lease (see idem.Lock.LeaveRunning). It was a timeout inside only
		// if the context idemkit received is still live: one registered
		// before idemkit gives up when that context ends, and then runs
		// idemkit and the handler on its own goroutine, so when the chain
		// returns here the handler has ended, and its answer is recorded.
		lock.LeaveRunning(ctx, fiber.StatusRequestTimeout, "Fiber's timeout middleware")
		return err
	}
	c.SetContext(ctx) // middleware outside idemkit sees the context it passed on
	if err != nil {
		// As Fiber itself does, but here, so the error page is what gets stored.
		if err := c.App().ErrorHandler(c, err); err != nil {
			_ = c.SendStatus(fiber.StatusInternalServerError)
		}
	}
	resp := c.Response()
	if resp.IsBodyStream() || c.RequestCtx().Hijacked() {
		if lock.Abandon(ctx, idem.ReasonStreamed).Withhold() && !c.RequestCtx().Hijacked() {
			withhold(e, resp)
		}
		return nil
	}
	_, _ = lock.Write(resp.Body()) // Write copies
	if lock.Finish(ctx, resp.StatusCode(), (*responseHeader)(resp)).Withhold() {
		withhold(e, resp)
	}
	return nil
}

// requestTarget is the path and query as the client sent them, copied.
func requestTarget(r *fasthttp.Request) string {
	if uri := r.Header.RequestURI(); len(uri) > 0 && uri[0] == '/' {
		return string(uri)
	}
	return string(r.URI().RequestURI()) // absolute-form target: keep the path and query
}

// ownMethod returns m as a string that outlives the request: a constant for
// the usual methods, so the common case does not allocate.
func ownMethod(m string) string {
	switch m {
	case fiber.MethodPost:
		return fiber.MethodPost
	case fiber.MethodPatch:
		return fiber.MethodPatch
	case fiber.MethodPut:
		return fiber.MethodPut
	case fiber.MethodDelete:
		return fiber.MethodDelete
	}
	return strings.Clone(m)
}

// contentEncoding is the request's Content-Encoding as sent, its field lines
// joined with ", "; a single line aliases fasthttp's buffer.
func contentEncoding(h *fasthttp.RequestHeader) string {
	lines := h.PeekAll(fiber.HeaderContentEncoding)
	switch len(lines) {
	case 0:
		return ""
	case 1:
		return utils.UnsafeString(lines[0])
	}
	return string(bytes.Join(lines, []byte(", ")))
}

// ownLines copies header values out of fasthttp's buffers: the key the
// store keeps is a part of a key field line, and stored response headers
// are kept as they are.
func ownLines(lines [][]byte) []string {
	if len(lines) == 0 {
		return nil
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = string(l)
	}
	return out
}

func respond(resp *fasthttp.Response, r *idem.Response, replayed bool) {
	resp.SetStatusCode(r.Status)
	for _, f := range r.Header {
		for i, v := range f.Values {
			if i == 0 {
				resp.Header.Set(f.Name, v) // replaces what earlier middleware set
			} else {
				resp.Header.Add(f.Name, v)
			}
		}
	}
	if replayed {
		resp.Header.Set(idem.ReplayedHeader, "true")
	}
	resp.SetBody(r.Body) // a copy: the stored record is read-only
}

// responseHeader lets Lock.Finish read the headers of the handler's
// response as they go on the wire; it is an idem.HeaderReader with
// AppendValues.
type responseHeader fasthttp.Response

// Values returns copies of the values of the header name: the stored record
// outlives fasthttp's buffers.
func (h *responseHeader) Values(name string) []string {
	return ownLines(h.peekAll(name))
}

// AppendValues is idem.HeaderReader's optional method: the values of the header
// name, without copies, for Lock.Finish, which needs them only until the
// store has copied them, while fasthttp's buffers are still the handler's
// response.
func (h *responseHeader) AppendValues(dst []string, name string) []string {
	for _, v := range h.peekAll(name) {
		dst = append(dst, utils.UnsafeString(v))
	}
	return dst
}

// peekAll returns the values of the header name that fasthttp sends.
// fasthttp derives Content-Length from the body it holds, which is the body
// stored, so that is not reported; and it reports a default Content-Type
// for a response that has none, which it sends only with a body.
func (h *responseHeader) peekAll(name string) [][]byte {
	resp := (*fasthttp.Response)(h)
	switch name {
	case fiber.HeaderContentLength:
		return nil
	case fiber.HeaderContentType:
		if !sendsContentType(resp) {
			return nil
		}
	}
	return resp.Header.PeekAll(name)
}

// sendsContentType reports whether fasthttp sends a Content-Type with resp.
// A type the handler set is always sent; fasthttp's default (text/plain;
// charset=utf-8, unless the server turns it off) only with a body, which
// 1xx, 204 and 304 responses never carry. ContentType reports the default
// for an unset type, so only when it reports the default and no body goes
// out must the two be told apart: on a scratch copy of the header with the
// default turned off.
func sendsContentType(resp *fasthttp.Response) bool {
	ct := resp.Header.ContentType()
	if len(ct) == 0 {
		return false
	}
	status := resp.StatusCode()
	withBody := len(resp.Body()) > 0 && status >= 200 && status != fiber.StatusNoContent && status != fiber.StatusNotModified
	if withBody || string(ct) != fiber.MIMETextPlainCharsetUTF8 {
		return true
	}
	scratch := scratchHeaders.Get().(*fasthttp.ResponseHeader)
	resp.Header.CopyTo(scratch)
	scratch.SetNoDefaultContentType(true)
	set := len(scratch.ContentType()) > 0
	scratch.Reset() // keeps no copy of a response's cookies in the pool
	scratchHeaders.Put(scratch)
	return set
}

// scratchHeaders keeps the headers sendsContentType copies into, so that
// a 204 costs no allocation once the pool is warm.
var scratchHeaders = sync.Pool{New: func() any { return new(fasthttp.ResponseHeader) }}

// withhold replaces the response in resp, which describes work that was
// rolled back or is not the key's outcome (idem.Finished.Withhold), with
// the Engine's answer for it. Nothing is sent yet: fasthttp writes the
// response once the handler chain returns.
func withhold(e *idem.Engine, resp *fasthttp.Response) {
	withheld := e.WithheldResponse()
	resp.Reset()
	respond(resp, &withheld, false)
}
