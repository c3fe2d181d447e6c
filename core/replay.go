package idem

import "net/http"

// storedHeader lists the replayable headers. The values are the handler's
// own, and the list lives in the Lock: the store copies both in Complete,
// so the usual few headers cost no allocation.
func (l *Lock) storedHeader(h HeaderReader) []HeaderField {
	if h == nil {
		return nil
	}
	found := l.header[:0]
	hh, direct := h.(http.Header) // names are canonical already: skip Values' canonicalisation
	appender, appends := h.(HeaderAppender)
	values := l.headerValues[:0]
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
			found = append(found, HeaderField{Name: name, Values: vs})
		}
	}
	if len(found) == 0 {
		return nil
	}
	return found
}
