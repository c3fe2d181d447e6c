package exchange

import (
	"bytes"
	"net/http"
)

// Action says what an adapter must do with a request.
type Action uint8

const (
	// Pass: run the handler as if idemkit were not there; nothing is
	// recorded.
	Pass Action = iota
	// Respond: send Decision.Response as it is; do not run the
	// handler. It is a replay when Decision.Replayed is set (add
	// ReplayedHeader: true), and a problem otherwise.
	Respond
	// Run: run the handler, copy its response body into
	// Decision.Lock as it is written, then call Lock.Finish, or
	// Lock.Abandon if the handler panicked or streamed its response.
	Run
)

// Decision is the Engine's answer to Begin.
//
// If Body is not nil, Begin consumed Request.BodyReader and the handler must
// be given Body as its request body instead.
type Decision struct {
	Action   Action
	Response Response
	Replayed bool
	Lock     Lock // set for Run: the lock the handler runs under
	Body     []byte
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

// SetBody gives r the body Begin read, if it read one (Decision.Body), for
// a request that passes through.
func (d *Decision) SetBody(r *http.Request) {
	if d.Body != nil {
		b := new(bodyReader)
		b.Reset(d.Body)
		r.Body = b
	}
}

// bodyReader hands the body Begin read back to the handler as its request
// body, so that bindings read it as usual.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }
