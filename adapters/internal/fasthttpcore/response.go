package fasthttpcore

import (
	"net/http"
	"sync"

	"github.com/valyala/fasthttp"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// respond writes r to resp, replacing what earlier middleware set.
func respond(resp *fasthttp.Response, r *exchange.Response, replayed bool) {
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
		resp.Header.Set(exchange.ReplayedHeader, "true")
	}
	resp.SetBody(r.Body) // a copy: the stored record is read-only
}

// withhold replaces the response in resp, which describes work that was
// rolled back or is not the key's outcome (exchange.Finished.Withhold), with
// the Engine's answer for it. Nothing is sent yet: fasthttp writes the
// response once the handler chain returns.
func withhold(e *idem.Engine, resp *fasthttp.Response) {
	withheld := e.Adapter().WithheldResponse()
	resp.Reset()
	respond(resp, &withheld, false)
}

// responseHeader lets Lock.Finish read the headers of the handler's
// response as they go on the wire; it is an exchange.HeaderReader with
// AppendValues.
type responseHeader fasthttp.Response

// Values returns copies of the values of the header name: the stored record
// outlives fasthttp's buffers.
func (h *responseHeader) Values(name string) []string {
	return ownLines(h.peekAll(name))
}

// AppendValues is exchange.HeaderReader's optional method: the values of the header
// name, without copies, for Lock.Finish, which needs them only until the
// store has copied them, while fasthttp's buffers are still the handler's
// response.
func (h *responseHeader) AppendValues(dst []string, name string) []string {
	for _, v := range h.peekAll(name) {
		dst = append(dst, unsafeString(v))
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
	case fasthttp.HeaderContentLength:
		return nil
	case fasthttp.HeaderContentType:
		if !sendsContentType(resp) {
			return nil
		}
	}
	return resp.Header.PeekAll(name)
}

// defaultContentType is the Content-Type fasthttp gives a response body
// that the handler left untyped.
const defaultContentType = "text/plain; charset=utf-8"

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
	withBody := len(resp.Body()) > 0 && status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
	if withBody || string(ct) != defaultContentType {
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
