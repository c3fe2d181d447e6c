package idem

import (
	"context"
	"errors"
	"net/http"
	"time"
)

// The adapters built on net/http types (idemhttp, Gin, Echo) describe
// requests and write decisions the same way; these two helpers are that
// shared translation, so no adapter carries a copy of it.

// HTTPRequest describes r to the Engine: method, request target as sent,
// the key header's field lines, content type and body (which Begin reads,
// within Config.MaxRequestBody). The caller sets Scope.
func (e *Engine) HTTPRequest(r *http.Request) Request {
	req := Request{
		Method:        r.Method,
		Path:          requestTarget(r),
		KeyLines:      r.Header[e.cfg.HeaderName],
		ContentType:   r.Header.Get("Content-Type"),
		BodyReader:    r.Body,
		ContentLength: r.ContentLength,
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
// AbortResponse) when the store rolled the handler's writes back with a
// failed completion (ErrRolledBack).
func (l *Lock) FinishHTTP(ctx context.Context, w http.ResponseWriter, status int, header HeaderReader) {
	if err := l.Finish(ctx, status, header); errors.Is(err, ErrRolledBack) {
		AbortResponse(w) // a success for work that was rolled back must not reach the client
	}
}

// AbortResponse withholds the response written to w so far and ends the
// connection, for a Finish that returned ErrRolledBack: the client then
// sees a broken connection, not a success for work that was rolled back,
// and retries with its key. It sets a write deadline in the past through
// http.ResponseController, so that net/http's buffered response (the
// status line included, for a body of up to about 4 KB) never leaves the
// process, whatever recovery middleware runs around the handler. Limits:
// a larger body has begun to go out (on HTTP/1.1 it arrives cut short; on
// HTTP/2 it may arrive whole before the stream is reset); and a writer
// chain that cannot reach the connection (a wrapper without Unwrap) gets a
// panic with http.ErrAbortHandler, which a recovery middleware that
// swallows it (gin.Recovery does) turns back into delivery.
func AbortResponse(w http.ResponseWriter) {
	if http.NewResponseController(w).SetWriteDeadline(time.Unix(1, 0)) == nil {
		return
	}
	panic(http.ErrAbortHandler)
}
