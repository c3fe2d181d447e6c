package fasthttpcore

import (
	"bytes"
	"net/http"
	"strings"
	"unsafe"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/valyala/fasthttp"
)

// newRequest describes r, whose method Fiber says is method, for
// Engine.Begin. What the store keeps (method, path, key lines) is copied
// out of fasthttp's buffers; what Begin only reads may alias them.
func newRequest(r *fasthttp.Request, method, keyHeader string) exchange.Request {
	req := exchange.Request{
		Method:          ownMethod(method),
		Path:            requestTarget(r),
		KeyLines:        ownLines(r.Header.PeekAll(keyHeader)),
		ContentType:     unsafeString(r.Header.ContentType()),
		ContentEncoding: contentEncoding(&r.Header),
	}
	if r.IsBodyStream() { // fiber.Config.StreamRequestBody
		req.BodyReader, req.ContentLength = r.BodyStream(), int64(max(r.Header.ContentLength(), -1))
	} else if boundary := r.Header.MultipartFormBoundary(); len(boundary) > 0 {
		req.Body = formBody(r, string(boundary))
	} else {
		req.Body = r.Body()
	}
	return req
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
	case http.MethodPost:
		return http.MethodPost
	case http.MethodPatch:
		return http.MethodPatch
	case http.MethodPut:
		return http.MethodPut
	case http.MethodDelete:
		return http.MethodDelete
	}
	return strings.Clone(m)
}

// contentEncoding is the request's Content-Encoding as sent, its field lines
// joined with ", "; a single line aliases fasthttp's buffer.
func contentEncoding(h *fasthttp.RequestHeader) string {
	lines := h.PeekAll(fasthttp.HeaderContentEncoding)
	switch len(lines) {
	case 0:
		return ""
	case 1:
		return unsafeString(lines[0])
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

// unsafeString is b as a string without a copy: for what is read only
// while b is unchanged.
func unsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
