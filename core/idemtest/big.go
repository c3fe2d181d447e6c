package idemtest

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"time"
)

// The /big route writes a large body in parts. With pause=1 it stops after
// the first part, so that a case can reset the client's connection while
// the response is being written, and reports what it saw of the reset.

// bigPart is what /big writes per call, and before pausing with pause=1.
const bigPart = 64 << 10

// bigBody is the body /big writes for call n: a repeated pattern, so that a
// body cut short, or another call's, is told apart from the whole.
func bigBody(n int64, size int) []byte {
	chunk := []byte(fmt.Sprintf("call %d;", n))
	body := make([]byte, 0, size)
	for len(body) < size {
		body = append(body, chunk[:min(len(chunk), size-len(body))]...)
	}
	return body
}

// bigOutcome is what a /big?pause=1 request saw of its client.
//
// The evidence that a reset met the response while it was being written
// has to be gathered below idemkit's capture, which tells the handler
// every write succeeded (the capture: the handler writes on, so that its
// response is stored whole). So the handler looks at the server's own
// writer, the one at the bottom of the Unwrap chain. Where that is
// net/http's (HTTP/1.1 or HTTP/2), whose server writes the response to the
// connection as the handler writes it and ends the request's context when
// the client's connection closes or its stream is reset, the handler waits
// after its first part for that context to end (the server has met the
// reset; no fixed sleep guesses when), writes the rest through the capture
// as any handler does, and then flushes the server's writer, which answers
// with the error its writes met (net/http keeps a failed write's error).
// That flush sends only what the handler wrote, and the capture never sees
// it, so it does not make the response a streamed one that goes unstored.
// A framework that sends the response only once the handler has returned
// (Fiber's adaptor buffers it) offers no such evidence: nothing of the
// response has left when the client resets, and no write of the handler
// can fail.
type bigOutcome struct {
	netHTTP    bool  // the server's writer is net/http's
	clientGone bool  // the server reported the client gone before the rest was written
	writeErr   error // what flushing the server's writer answered after the rest
}

// serveBig writes the body of size bytes in parts of bigPart, pausing
// after the first with pause=1 (see bigOutcome).
func (a *app) serveBig(w http.ResponseWriter, r *http.Request, c appCall) {
	size, _ := strconv.Atoi(c.query.Get("size"))
	w.Header().Set("Content-Type", "application/octet-stream")
	body := bigBody(c.n, size)
	if c.query.Get("pause") != "1" {
		writeParts(w, body)
		return
	}
	first := body[:min(len(body), bigPart)]
	writeParts(w, first)
	var out bigOutcome
	if rest := body[len(first):]; len(rest) > 0 {
		out = a.writeAfterPause(r.Context(), w, rest)
	}
	select {
	case a.bigDone <- out:
	default:
	}
}

// writeParts writes body in parts of bigPart. Like most handlers, it
// writes on when a write fails.
func writeParts(w http.ResponseWriter, body []byte) {
	for len(body) > 0 {
		part := body[:min(len(body), bigPart)]
		body = body[len(part):]
		w.Write(part)
	}
}

// writeAfterPause tells the case the first part is written, waits to be
// resumed, and writes rest, gathering the evidence bigOutcome describes.
func (a *app) writeAfterPause(ctx context.Context, w http.ResponseWriter, rest []byte) bigOutcome {
	a.midBody <- struct{}{}
	select {
	case <-a.resume:
	case <-a.release:
	case <-time.After(20 * time.Second):
	}
	below := serverWriter(w)
	out := bigOutcome{netHTTP: isNetHTTP(below)}
	if out.netHTTP {
		select {
		case <-ctx.Done():
			out.clientGone = true
		case <-a.release:
		case <-time.After(5 * time.Second): // within the case's own wait, which then says why
		}
	}
	writeParts(w, rest)
	if out.netHTTP {
		out.writeErr = http.NewResponseController(below).Flush()
	}
	return out
}

// serverWriter returns the writer at the bottom of w's Unwrap chain: the
// server's own, below every middleware's writer and idemkit's capture.
func serverWriter(w http.ResponseWriter) http.ResponseWriter {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}

// isNetHTTP reports whether w is one of net/http's own writers, which are
// unexported.
func isNetHTTP(w http.ResponseWriter) bool {
	t := reflect.TypeOf(w)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath() == "net/http"
}
