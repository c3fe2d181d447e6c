package exchange

import (
	"io"
	"net/http"
	"strings"
)

// Request is what an adapter tells the Engine about an incoming request.
type Request struct {
	Method string
	// Path is the request target as sent: path and query.
	Path string
	// Scope is the tenant the key belongs to ("" for a single global tenant).
	Scope string
	// KeyLines holds the value of each key header field line, as received.
	KeyLines    []string
	ContentType string
	// ContentEncoding is the Content-Encoding header's value as sent
	// (several field lines joined with ", "), or "" if there is none.
	ContentEncoding string
	// Body is the request body if the framework already holds it in memory.
	Body []byte
	// BodyReader, used when Body is nil, is read by Begin up to the limit.
	BodyReader io.Reader
	// ContentLength is the declared body length, or -1 if unknown.
	ContentLength int64
}

// HTTPRequest describes r to the Engine: method, request target as sent,
// the field lines of keyHeader (the Engine's key header, in canonical
// form: Engine.HeaderName), content type and encoding, and body (which
// Begin reads, within Config.MaxRequestBody). The caller sets Scope.
func HTTPRequest(r *http.Request, keyHeader string) Request {
	req := Request{
		Method:        r.Method,
		Path:          requestTarget(r),
		KeyLines:      r.Header[keyHeader],
		ContentType:   first(r.Header["Content-Type"]), // the name is canonical: no need for Header.Get
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

// first is the first of a header's values, or "".
func first(values []string) string {
	if len(values) == 0 {
		return ""
	}
	return values[0]
}

// requestTarget is the path and query as the client sent them.
func requestTarget(r *http.Request) string {
	if len(r.RequestURI) > 0 && r.RequestURI[0] == '/' {
		return r.RequestURI
	}
	return r.URL.RequestURI()
}
