package server

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"

	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/flaky"
)

// Fiber v2 and v3 both run on fasthttp, and differ in their Ctx: what the
// two servers do the same is written here once, on fasthttp's request
// context, and each Fiber file only hands its Ctx's parts to it.

// writeFastHTTP writes a rendered response.
func writeFastHTTP(resp *fasthttp.Response, r exchange.Response) {
	for _, f := range r.Header {
		for _, v := range f.Values {
			resp.Header.Add(f.Name, v)
		}
	}
	resp.SetStatusCode(r.Status)
	resp.SetBody(r.Body)
}

// logFastHTTP writes the request log's line for a request that began at
// start.
func logFastHTTP(cfg Config, framework string, rc *fasthttp.RequestCtx, start time.Time) {
	// Copies: fasthttp reuses these buffers once the handler returns.
	logLine(cfg.Logger, framework, string(rc.Method()), string(rc.Request.URI().Path()), rc.Response.StatusCode(),
		string(rc.Response.Header.Peek(exchange.ReplayedHeader)) == "true", time.Since(start))
}

// guardFastHTTP is guard on fasthttp: it answers a request rs refuses,
// and reports whether the request may go on.
func guardFastHTTP(a *api.API, rs routes, method, path string, resp *fasthttp.Response) bool {
	status, allow := rs.check(method, path)
	if status == http.StatusOK {
		return true
	}
	if allow != "" {
		resp.Header.Set("Allow", allow)
	}
	writeFastHTTP(resp, frameworkError(a, status))
	return false
}

// checkWebhookFastHTTP is api.API.ReadWebhook on fasthttp: it checks the
// body as received (fasthttp's Request.Body, which the handler is served:
// not Fiber's Ctx.Body, which decodes gzip), answers a webhook that fails,
// and reports whether it passed.
func checkWebhookFastHTTP(a *api.API, rc *fasthttp.RequestCtx) bool {
	var codings []string
	for _, v := range rc.Request.Header.PeekAll("Content-Encoding") {
		codings = append(codings, string(v))
	}
	resp, ok := a.CheckWebhookBody(fastHTTPHeader(rc), codings, rc.Request.Body(), nil)
	if !ok {
		writeFastHTTP(&rc.Response, resp)
	}
	return ok
}

// fastHTTPHeader reads rc's request header fields, copied out of
// fasthttp's buffers.
func fastHTTPHeader(rc *fasthttp.RequestCtx) func(string) string {
	return func(name string) string { return string(rc.Request.Header.Peek(name)) }
}

// serveWithContext serves rc with a net/http handler, like Fiber's
// adaptor, but with ctx as the request's context: the Fiber Ctx's user
// context, which carries the transaction slot and idemkit's lock.
func serveWithContext(rc *fasthttp.RequestCtx, ctx context.Context, h http.Handler) {
	fasthttpadaptor.NewFastHTTPHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(ctx))
	}))(rc)
}

// planFault is flaky.Network.Plan for a fasthttp request to path, as
// Fiber routes it.
func planFault(n *flaky.Network, rc *fasthttp.RequestCtx, path string) flaky.Fault {
	h := &rc.Request.Header
	return n.Plan(string(rc.Method()), path, string(h.Peek(flaky.Header)), string(h.Peek("Authorization")),
		string(h.Peek("Idempotency-Key")))
}

// dropFastHTTP breaks off the response in rc (flaky.Network.Drop) on the
// hijacked connection, instead of sending it.
func dropFastHTTP(n *flaky.Network, rc *fasthttp.RequestCtx, ctx context.Context) {
	// Copies: fasthttp reuses the response's buffers.
	status, header := rc.Response.StatusCode(), http.Header{}
	for k, v := range rc.Response.Header.All() {
		header.Add(string(k), string(v))
	}
	body := bytes.Clone(rc.Response.Body())
	rc.HijackSetNoResponse(true)
	rc.Hijack(func(conn net.Conn) { n.Drop(ctx, conn, status, header, body) })
}

// stripeFastHTTP is api.StripeEdge on fasthttp: next serves the request,
// and its error, if any, is answered by errorHandler first, as Fiber
// would once the middleware returns.
func stripeFastHTTP(rc *fasthttp.RequestCtx, next func() error, errorHandler func(error) error) error {
	if !api.IsStripeRequest(string(rc.Method()), string(rc.Request.URI().Path()), string(rc.Request.Header.ContentType())) {
		return next()
	}
	form := api.ParseStripeForm(rc.Request.Body())
	if err := next(); err != nil {
		if err := errorHandler(err); err != nil {
			return err
		}
	}
	resp := &rc.Response
	ans := api.StripeRender(string(rc.Request.URI().Path()), form, resp.StatusCode(), string(resp.Header.ContentType()), bytes.Clone(resp.Body()))
	for k, v := range ans.Header {
		resp.Header.Set(k, v[0])
	}
	resp.Header.Del("Link")
	resp.SetStatusCode(ans.Status)
	resp.SetBody(ans.Body)
	return nil
}
