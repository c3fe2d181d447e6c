package idem

import (
	"net/http"
	"slices"
)

// storedHeader lists the replayable headers. The values are the handler's
// own: the store copies them in Complete.
func (e *Engine) storedHeader(h HeaderReader) []HeaderField {
	if h == nil {
		return nil
	}
	var fields [8]HeaderField // enough for the usual few, on the stack
	found := fields[:0]
	hh, direct := h.(http.Header) // names are canonical already: skip Values' canonicalisation
	for _, name := range e.replayHeaders {
		var vs []string
		if direct {
			vs = hh[name]
		} else {
			vs = h.Values(name)
		}
		if len(vs) > 0 {
			found = append(found, HeaderField{Name: name, Values: vs})
		}
	}
	if len(found) == 0 {
		return nil
	}
	return slices.Clone(found)
}
