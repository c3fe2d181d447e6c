package idem

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
	"unsafe"
)

// The adapters built on net/http types (idemhttp, Gin, Echo) describe
// requests and write decisions the same way; these two helpers are that
// shared translation, so no adapter carries a copy of it.

// HTTPRequest describes r to the Engine: method, request target as sent,
// the key header's field lines, content type and encoding, and body (which
// Begin reads, within Config.MaxRequestBody). The caller sets Scope.
func (e *Engine) HTTPRequest(r *http.Request) Request {
	req := Request{
		Method:        r.Method,
		Path:          requestTarget(r),
		KeyLines:      r.Header[e.cfg.HeaderName],
		ContentType:   r.Header.Get("Content-Type"),
		BodyReader:    r.Body,
		ContentLength: r.ContentLength,
	}
	switch enc := r.Header["Content-Encoding"]; len(enc) {
	case 0:
	case 1:
		req.ContentEncoding = enc[0]
	default:
		req.ContentEncoding = strings.Join(enc, ", ")
	}
	if r.Body == nil || r.Body == http.NoBody {
		req.Body, req.BodyReader = []byte{}, nil
	}
	return req
}

// requestTarget is the path and query as the client sent them.
func requestTarget(r *http.Request) string {
	if len(r.RequestURI) > 0 && r.RequestURI[0] == '/' {
		return r.RequestURI
	}
	return r.URL.RequestURI()
}

// WriteTo writes the Response of a Respond decision to w, with
// ReplayedHeader set on a replay. Every header value is copied into one
// array of this response's own: the stored record's values, and the
// Engine's shared ones (problem media type, Retry-After), must never be
// reachable from a header map that middleware may edit in place.
func (d *Decision) WriteTo(w http.ResponseWriter) {
	h := w.Header()
	n := 0
	for _, f := range d.Response.Header {
		n += len(f.Values)
	}
	if d.Replayed {
		n++
	}
	values := make([]string, n)
	for _, f := range d.Response.Header {
		k := copy(values, f.Values)
		h[f.Name], values = values[:k:k], values[k:]
	}
	if d.Replayed {
		values[0] = "true"
		h[ReplayedHeader] = values[:1:1]
	}
	w.WriteHeader(d.Response.Status)
	_, _ = w.Write(d.Response.Body) // commits the status even for an empty body
}

// FinishHTTP is Lock.Finish for adapters built on net/http: it records the
// response the handler wrote to w, and withholds that response (see
// abortResponse) when Finish says it must (Finished.Withhold): the store
// rolled the handler's writes back, or another request holds the key.
//
// One response is neither stored nor released: the answer of a timeout
// middleware registered inside idemkit that gave up on the handler
// (http.TimeoutHandler, with any message, Echo's Timeout, gin-contrib's
// timeout), as WritingStatus saw it written. Such a middleware answers
// while the handler goes on running in a goroutine of its own, which
// idemkit cannot see end; releasing the key would let a retry run beside
// it. The key is left to its lease instead (retries get 409 until it runs
// out), the handler's context is cancelled, and an error says to use
// Config.HandlerTimeout or to register the timeout outside idemkit.
func (l *Lock) FinishHTTP(ctx context.Context, w http.ResponseWriter, status int, header HeaderReader) {
	if l.timeoutInside != "" && !storable(status) {
		l.LeaveRunning(ctx, status, strings.TrimSuffix(l.timeoutInside, "."))
		return
	}
	withholdHTTP(w, l.Finish(ctx, status, header))
}

// withholdHTTP breaks off the response written to w when f says it must
// not reach the client (see abortResponse).
func withholdHTTP(w http.ResponseWriter, f Finished) {
	if f.Withhold() {
		abortResponse(w) // a success for work undone, or not the key's outcome, must not reach the client
	}
}

// abortResponse withholds the response written to w so far and ends the
// connection, for a Finish whose outcome must be withheld: the client then
// sees a broken connection, not a success for work that was rolled back
// (or that is not the key's outcome), and retries with its key. It sets a write deadline in the past through
// http.ResponseController, so that net/http's buffered response (the
// status line included, for a body of up to about 4 KB) never leaves the
// process, whatever recovery middleware runs around the handler. Limits:
// a larger body has begun to go out (on HTTP/1.1 it arrives cut short; on
// HTTP/2 it may arrive whole before the stream is reset); and a writer
// chain that cannot reach the connection (a wrapper without Unwrap) gets a
// panic with http.ErrAbortHandler, which a recovery middleware that
// swallows it (gin.Recovery does) turns back into delivery.
func abortResponse(w http.ResponseWriter) {
	if http.NewResponseController(w).SetWriteDeadline(pastDeadline) == nil {
		return
	}
	panic(http.ErrAbortHandler)
}

// pastDeadline is a write deadline that has passed: set on a connection, it
// stops whatever is still buffered for it from being sent.
var pastDeadline = time.Unix(1, 0)

// delivery carries a guarded handler's response body to the client for an
// adapter built on net/http, while the Lock keeps every byte the handler
// writes. After the first write that fails because the client is gone (a
// reset connection, an HTTP/2 stream reset), it stops sending and tells
// the handler the write succeeded: the handler then writes its response to
// the end, so what is stored is that response whole, and the client's
// retry gets it replayed. The bytes the client happened to accept never
// decide what is stored. The zero value is ready to use.
type delivery struct {
	failed bool
}

// Write sends p to w unless an earlier write failed, keeps p in l, and
// reports all of p written. A body the response may not have (a 204 or
// 304, a HEAD) is neither sent nor kept, and its error is returned.
func (d *delivery) Write(w io.Writer, l *Lock, p []byte) (int, error) {
	if !d.failed {
		if _, err := w.Write(p); err != nil {
			if errors.Is(err, http.ErrBodyNotAllowed) {
				return 0, err
			}
			d.failed = true
		}
	}
	return l.Write(p)
}

// WriteString is Write for writers with a WriteString method.
func (d *delivery) WriteString(w io.StringWriter, l *Lock, s string) (int, error) {
	if !d.failed {
		if _, err := w.WriteString(s); err != nil {
			if errors.Is(err, http.ErrBodyNotAllowed) {
				return 0, err
			}
			d.failed = true
		}
	}
	// Lock.Write copies and never keeps p, so viewing s as bytes is safe.
	return l.Write(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// Failed reports whether a write to the client failed: the response was
// recorded but did not reach the client whole.
func (d *delivery) Failed() bool { return d.failed }
