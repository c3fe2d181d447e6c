package idem

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
)

// The net/http glue every adapter built on net/http types (idemhttp, Gin,
// Echo) shares: the response writer that captures what the handler
// writes, the reader that hands the body Begin read back, and the end of a
// locked request. Adapters only translate their framework to these.

// ResponseCapture is the http.ResponseWriter a guarded handler writes to:
// it passes everything through to the writer below and copies the body
// into the Lock (see delivery), records the final status, and marks the
// response streamed when it is flushed, hijacked or switches protocols, so
// that it is never stored. Reset it before use; an adapter keeps it in the
// per-request memory it allocates anyway.
type ResponseCapture struct {
	http.ResponseWriter
	lock          *Lock
	status        int
	wroteHeader   bool
	streamed      bool
	headerOnWrite bool // the writer below sends the header with the body, not at WriteHeader
	delivery      delivery
	body          bodyReader // the request body Begin read, handed back to the handler
}

// Reset makes c capture what is written to w for l.
func (c *ResponseCapture) Reset(w http.ResponseWriter, l *Lock) {
	*c = ResponseCapture{ResponseWriter: w, lock: l, status: http.StatusOK}
}

// HeaderSentWithBody tells c that the writer below sends the response's
// header with the first body write (or after the handler), not at
// WriteHeader, as Gin's writer does: the header a replay gives is then
// the one of that moment.
func (c *ResponseCapture) HeaderSentWithBody() { c.headerOnWrite = true }

// WriteHeader records the final status: informational responses (103
// Early Hints) pass through before it, and 101 Switching Protocols is
// final and streamed.
func (c *ResponseCapture) WriteHeader(code int) {
	if !c.wroteHeader && (code >= 200 || code == http.StatusSwitchingProtocols) {
		c.status, c.wroteHeader = code, true
		c.streamed = c.streamed || code == http.StatusSwitchingProtocols
		c.lock.WritingStatus(code)
		if !c.headerOnWrite {
			c.lock.headerSent(c.ResponseWriter.Header())
		}
	}
	c.ResponseWriter.WriteHeader(code)
}

// Write sends p and keeps all of it (see delivery): what is stored is what
// the handler wrote, whether or not the client took it.
func (c *ResponseCapture) Write(p []byte) (int, error) {
	c.bodyWritten()
	return c.delivery.Write(c.ResponseWriter, c.lock, p)
}

// bodyWritten notes a body write: the header goes out with it, if it has
// not already (an implicit 200, as net/http sends it).
func (c *ResponseCapture) bodyWritten() {
	c.wroteHeader = true
	if c.lock.sent == nil {
		c.lock.headerSent(c.ResponseWriter.Header())
	}
}

// WriteString is Write for a string, without copying it first when the
// writer below takes strings.
func (c *ResponseCapture) WriteString(s string) (int, error) {
	c.bodyWritten()
	if sw, ok := c.ResponseWriter.(io.StringWriter); ok {
		return c.delivery.WriteString(sw, c.lock, s)
	}
	return c.delivery.Write(c.ResponseWriter, c.lock, []byte(s))
}

// FlushError flushes the writer below, as http.ResponseController does,
// and marks the response streamed.
func (c *ResponseCapture) FlushError() error {
	c.streamed = true
	return http.NewResponseController(c.ResponseWriter).Flush()
}

// Flush implements http.Flusher.
func (c *ResponseCapture) Flush() { _ = c.FlushError() }

// Hijack hands the connection to the handler, as http.ResponseController
// does, and marks the response streamed once it did.
func (c *ResponseCapture) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(c.ResponseWriter).Hijack()
	if err == nil {
		c.streamed = true
	}
	return conn, rw, err
}

// Unwrap lets http.ResponseController reach the writer below.
func (c *ResponseCapture) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// Status returns the final status written, 200 if only a body was.
func (c *ResponseCapture) Status() int { return c.status }

// End ends the Lock for the response written through c, once the handler
// has returned: it is abandoned if it was streamed (flushed, hijacked,
// switched protocols), and recorded with this status otherwise (see
// FinishHTTP). ctx is the request's context as the adapter received it.
func (c *ResponseCapture) End(ctx context.Context, status int) {
	if c.streamed {
		if c.lock.Abandon(ctx, ReasonStreamed).Withhold() {
			// What was flushed is gone; cut the connection before the rest
			// goes, if it can still be reached (a hijacked one cannot).
			_ = http.NewResponseController(c.ResponseWriter).SetWriteDeadline(pastDeadline)
		}
		return
	}
	c.lock.FinishHTTP(ctx, c.ResponseWriter, status, c.ResponseWriter.Header())
}

// AbandonOnPanic, deferred by an adapter around the handler it runs under
// l, abandons l as a panic and lets the panic go on to the framework's
// recovery (or net/http's), which decides what the client sees.
func (l *Lock) AbandonOnPanic(ctx context.Context) {
	if p := recover(); p != nil {
		_ = l.Abandon(ctx, ReasonPanic)
		panic(p)
	}
}

// bodyReader hands the body Begin read back to the handler as its request
// body, so that bindings read it as usual.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

// SetRequestBody gives r, the request of the handler that writes to c,
// the body Begin read, if it read one (Decision.Body), from memory c
// already holds.
func (c *ResponseCapture) SetRequestBody(r *http.Request, body []byte) {
	if body != nil {
		c.body.Reset(body)
		r.Body = &c.body
	}
}

// SetBody gives r the body Begin read, if it read one (Decision.Body), for
// a request that passes through.
func (d *Decision) SetBody(r *http.Request) {
	if d.Body != nil {
		b := new(bodyReader)
		b.Reset(d.Body)
		r.Body = b
	}
}
