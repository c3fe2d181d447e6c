package servers

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/url"

	"github.com/valyala/fasthttp"
)

// Invoker calls a server's handler chain in process: no network, no
// connection handling, only what the framework and idemkit do per request.
type Invoker interface {
	// Do sends RequestBody to POST Path with key as the Idempotency-Key
	// (none if key is nil) and returns the response status.
	Do(key []byte) int
}

// Invoker returns an Invoker for s. It is not safe for concurrent use.
func (s *Server) Invoker() Invoker {
	switch {
	case s.App != nil:
		return newFiberInvoker(s.App.Handler())
	case s.AppV3 != nil:
		return newFiberInvoker(s.AppV3.Handler())
	}
	return &httpInvoker{h: s.Handler, w: &discardWriter{header: http.Header{}}}
}

// httpInvoker builds each request as net/http's server would hand it to
// the handler, minus the parsing: the same cost for every configuration.
type httpInvoker struct {
	h http.Handler
	w *discardWriter
}

var ordersURL = &url.URL{Path: Path}

func (i *httpInvoker) Do(key []byte) int {
	header := http.Header{"Content-Type": {"application/json"}}
	if key != nil {
		header["Idempotency-Key"] = []string{string(key)}
	}
	u := *ordersURL
	r := &http.Request{
		Method: http.MethodPost, URL: &u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: header, Body: io.NopCloser(bytes.NewReader(RequestBody)), ContentLength: int64(len(RequestBody)),
		Host: "bench", RemoteAddr: "127.0.0.1:40000", RequestURI: Path,
	}
	i.w.reset()
	i.h.ServeHTTP(i.w, r)
	if i.w.status == 0 {
		return http.StatusOK
	}
	return i.w.status
}

// discardWriter is a ResponseWriter that keeps the status and drops the body.
type discardWriter struct {
	header http.Header
	status int
	n      int
}

func (w *discardWriter) reset() {
	clear(w.header)
	w.status, w.n = 0, 0
}

func (w *discardWriter) Header() http.Header { return w.header }

func (w *discardWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

// fiberInvoker calls a Fiber app's fasthttp handler (v2 or v3) with one
// RequestCtx reused across requests, as fasthttp's server reuses it on a
// connection.
type fiberInvoker struct {
	h   fasthttp.RequestHandler
	ctx fasthttp.RequestCtx
}

func newFiberInvoker(h fasthttp.RequestHandler) *fiberInvoker {
	i := &fiberInvoker{h: h}
	var req fasthttp.Request
	i.ctx.Init(&req, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}, nil)
	return i
}

func (i *fiberInvoker) Do(key []byte) int {
	c := &i.ctx
	c.Request.Reset()
	c.Response.Reset()
	c.Request.Header.SetMethod(fasthttp.MethodPost)
	c.Request.SetRequestURI(Path)
	c.Request.Header.SetHost("bench")
	c.Request.Header.SetContentType("application/json")
	if key != nil {
		c.Request.Header.SetBytesV("Idempotency-Key", key)
	}
	c.Request.SetBody(RequestBody)
	i.h(c)
	return c.Response.StatusCode()
}
