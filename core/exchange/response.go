package exchange

import (
	"strconv"
	"unicode/utf8"
)

// ReplayedHeader is set to "true" on every replayed response.
const ReplayedHeader = "Idempotent-Replayed"

// Response is a stored HTTP response: what a replay sends back.
type Response struct {
	Status int
	// Header holds only the headers that are replayed (see Config.ReplayHeaders).
	Header []HeaderField
	Body   []byte
}

// HeaderField is one stored response header. A short ordered list keeps a
// stored record small and cheap for the garbage collector to scan, which
// matters when a store holds many thousands of records in memory.
type HeaderField struct {
	// Name is canonical (as http.CanonicalHeaderKey returns it).
	Name   string
	Values []string
}

// Get returns the first value of the named header, or "".
func (r *Response) Get(name string) string {
	for _, f := range r.Header {
		if f.Name == name && len(f.Values) > 0 {
			return f.Values[0]
		}
	}
	return ""
}

// Storable reports whether a response with this status is recorded. Server
// errors and the statuses that ask the client to retry (408, 409, 425, 429)
// are not: their retry must run the handler again.
func Storable(status int) bool {
	switch status {
	case 408, 409, 425, 429:
		return false
	}
	return status >= 200 && status < 500
}

// ProblemContentType is the media type of RFC 9457 problem details.
const ProblemContentType = "application/problem+json"

// The problem type names; Config.ProblemBase + name is the type URI.
const (
	ProblemKeyMissing       = "key-missing"
	ProblemKeyInvalid       = "key-invalid"
	ProblemKeyReused        = "key-reused"
	ProblemInProgress       = "request-in-progress"
	ProblemPayloadTooLarge  = "payload-too-large"
	ProblemStoreUnavailable = "store-unavailable"
	ProblemBodyUnreadable   = "body-unreadable"
	ProblemStoreFull        = "store-full"
)

// Problem is an RFC 9457 problem details object.
type Problem struct {
	// Type is the URI that identifies the problem type; it is also sent as a
	// Link header with rel="describedby".
	Type   string
	Title  string
	Status int
	Detail string
}

// Response renders p as an application/problem+json response, without
// reflection: problems are sent on hot paths such as 409 storms.
func (p Problem) Response() Response {
	body := make([]byte, 0, 96+len(p.Type)+len(p.Title)+len(p.Detail))
	body = append(body, `{"type":`...)
	body = appendJSONString(body, p.Type)
	body = append(body, `,"title":`...)
	body = appendJSONString(body, p.Title)
	body = append(body, `,"status":`...)
	body = strconv.AppendInt(body, int64(p.Status), 10)
	if p.Detail != "" {
		body = append(body, `,"detail":`...)
		body = appendJSONString(body, p.Detail)
	}
	body = append(body, '}')
	return Response{
		Status: p.Status,
		Header: []HeaderField{
			{Name: "Content-Type", Values: problemContentType},
			{Name: "Link", Values: []string{"<" + p.Type + `>; rel="describedby"; type="text/html"`}},
		},
		Body: body,
	}
}

var problemContentType = []string{ProblemContentType}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD
// so the document stays valid whatever a detail message contains.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, "\ufffd"...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}
