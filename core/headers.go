package idem

import (
	"net/http"
	"sync"

	"github.com/idemkit/idemkit/core/exchange"
)

// headerScratch backs the replayable headers of a response Finish stores:
// room for the usual few, lent to the store, which copies what it keeps,
// and recycled once Complete returns. Pooled rather than part of the Lock,
// which would then be a larger object to allocate and scan on every first
// request.
type headerScratch struct {
	fields [4]exchange.HeaderField
	values [4]string
	sent   []exchange.HeaderField // the replayable headers as sent (see Lock.headerSent)
}

var headerScratchPool = sync.Pool{New: func() any { return new(headerScratch) }}

// recycle drops the references to the handler's strings and returns hs to
// the pool.
func (hs *headerScratch) recycle() {
	*hs = headerScratch{}
	headerScratchPool.Put(hs)
}

// storedHeader lists the replayable headers, in hs while they fit. The
// values are the handler's own: the store copies them in Complete.
func (l *lock) storedHeader(h exchange.HeaderReader, hs *headerScratch) []exchange.HeaderField {
	if h == nil {
		return nil
	}
	found := hs.fields[:0]
	hh, direct := h.(http.Header) // names are canonical already: skip Values' canonicalisation
	appender, appends := h.(exchange.HeaderAppender)
	values := hs.values[:0]
	for _, name := range l.e.replayHeaders {
		var vs []string
		switch {
		case direct:
			vs = hh[name]
		case appends:
			start := len(values)
			values = appender.AppendValues(values, name)
			vs = values[start:len(values):len(values)]
		default:
			vs = h.Values(name)
		}
		if len(vs) > 0 {
			found = append(found, exchange.HeaderField{Name: name, Values: vs})
		}
	}
	if len(found) == 0 {
		return nil
	}
	return found
}

// HeaderSent keeps the replayable headers of h as they are now, when the
// response's header goes out: what the client got is what a replay gives,
// not the header as a handler left it afterwards (net/http sends nothing a
// handler sets after WriteHeader). Only the first call counts. The values
// are copied, since a handler may still change h's slices in place.
func (l *lock) HeaderSent(h http.Header) {
	if l.sent != nil {
		return
	}
	hs := headerScratchPool.Get().(*headerScratch)
	fields, values := hs.fields[:0], hs.values[:0]
	for _, name := range l.e.replayHeaders {
		vs := h[name]
		if len(vs) == 0 {
			continue
		}
		start := len(values)
		values = append(values, vs...)
		fields = append(fields, exchange.HeaderField{Name: name, Values: values[start:len(values):len(values)]})
	}
	hs.sent = fields
	l.sent = hs
}

// recycleSent returns what headerSent kept to the pool.
func (l *lock) recycleSent() {
	if l.sent != nil {
		l.sent.recycle()
		l.sent = nil
	}
}
