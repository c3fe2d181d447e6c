package exchange

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"time"
	"unsafe"
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
	lock          Lock
	status        int
	wroteHeader   bool
	streamed      bool
	headerOnWrite bool // the writer below sends the header with the body, not at WriteHeader
	headerNoted   bool // the header, as sent, is noted in the Lock (Lock.HeaderSent)
	delivery      delivery
	body          bodyReader // the request body Begin read, handed back to the handler
	// timeouts are the timeout middlewares to look for when a status that
	// is not stored is written (see WatchTimeouts); timeoutInside names the
	// one found writing it, or is "".
	timeouts      []string
	timeoutInside string
}

// Reset makes c capture what is written to w for l, watching for the
// timeout middlewares an earlier WatchTimeouts named.
func (c *ResponseCapture) Reset(w http.ResponseWriter, l Lock) {
	*c = ResponseCapture{ResponseWriter: w, lock: l, status: http.StatusOK, timeouts: c.timeouts}
}

// WatchTimeouts names the timeout middlewares of the adapter's framework
// that c must recognise when they answer for a handler they leave running
// (see TimeoutMiddleware), beside http.TimeoutHandler, which c always
// recognises: by function, or by package (a name ending in '.'), as
// runtime.Frame.Function gives them. Reset keeps them. The names are the
// adapter's knowledge of its framework, and idemtest.TestTimeoutInside
// holds them against the versions the adapter requires.
func (c *ResponseCapture) WatchTimeouts(names []string) { c.timeouts = names }

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
		if !Storable(code) {
			c.timeoutInside = timeoutMiddlewareWriting(c.timeouts)
		}
		if !c.headerOnWrite {
			c.noteHeader()
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
	c.noteHeader()
}

// noteHeader tells the Lock the header as it goes out, once.
func (c *ResponseCapture) noteHeader() {
	if !c.headerNoted {
		c.headerNoted = true
		c.lock.HeaderSent(c.ResponseWriter.Header())
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
// has returned, and withholds that response (see abortResponse) when the
// Lock's end says it must (Finished.Withhold): the store rolled the
// handler's writes back, or another request holds the key. ctx is the
// request's context as the adapter received it.
//
// A streamed response (flushed, hijacked, switched protocols) is abandoned,
// any other recorded with this status. One is neither recorded nor
// released: the answer of a timeout middleware registered inside idemkit
// that gave up on the handler (see WatchTimeouts), which answers while the
// handler goes on running in a goroutine of its own, which idemkit cannot
// see end; releasing the key would let a retry run beside it. The key is
// left to its lease instead (Lock.LeaveRunning: retries get 409 until it
// runs out), the handler's context is cancelled, and an error says to use
// Config.HandlerTimeout or to register the timeout outside idemkit.
func (c *ResponseCapture) End(ctx context.Context, status int) {
	switch {
	case c.streamed:
		if c.lock.Abandon(ctx, ReasonStreamed).Withhold() {
			// What was flushed is gone; cut the connection before the rest
			// goes, if it can still be reached (a hijacked one cannot).
			_ = http.NewResponseController(c.ResponseWriter).SetWriteDeadline(pastDeadline)
		}
	case c.timeoutInside != "" && !Storable(status):
		c.lock.LeaveRunning(ctx, status, strings.TrimSuffix(c.timeoutInside, "."))
	case c.lock.Finish(ctx, status, c.ResponseWriter.Header()).Withhold():
		abortResponse(c.ResponseWriter) // a success for work undone, or not the key's outcome, must not reach the client
	}
}

// SetRequestBody gives r, the request of the handler that writes to c,
// the body Begin read, if it read one (Decision.Body), from memory c
// already holds.
func (c *ResponseCapture) SetRequestBody(r *http.Request, body []byte) {
	if body != nil {
		c.body.Reset(body)
		r.Body = &c.body
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
func (d *delivery) Write(w io.Writer, l Lock, p []byte) (int, error) {
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
func (d *delivery) WriteString(w io.StringWriter, l Lock, s string) (int, error) {
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

// A timeout middleware that runs the handler on a goroutine of its own and
// answers for it when time is up (http.TimeoutHandler, and the timeout
// middlewares of frameworks) lets the request end while the handler goes
// on running. Registered inside idemkit, its answer reaches
// the adapter as an ordinary response, and releasing the key for it (it is
// never storable: 503, 408) would let a retry run beside the handler.
//
// Such an answer is told from the handler's own by who writes its status:
// the middleware's own code is on the stack when it does, whatever message
// or status it was configured with. The stack is only looked at for a
// status that would release the key, so stored responses cost nothing.

// netHTTPTimeout is the function of http.TimeoutHandler that writes its
// answer; Echo's Timeout middleware is built on it too.
const netHTTPTimeout = "net/http.(*timeoutHandler).ServeHTTP"

// timeoutMiddlewareWriting returns netHTTPTimeout or the first of names
// whose code is on the calling goroutine's stack, or "".
func timeoutMiddlewareWriting(names []string) string {
	var pcs [64]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		if f.Function == netHTTPTimeout {
			return netHTTPTimeout
		}
		for _, m := range names {
			if f.Function == m || strings.HasSuffix(m, ".") && strings.HasPrefix(f.Function, m) {
				return m
			}
		}
		if !more {
			return ""
		}
	}
}
