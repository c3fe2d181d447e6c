package idem

import (
	"strconv"
	"unicode/utf8"
)

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

type problemSpec struct {
	name   string
	title  string
	status int
}

// The titles are stable per type: clients may show them, and the detail
// carries what is specific to one request.
var problemSpecs = [...]problemSpec{
	{ProblemKeyMissing, "Idempotency-Key header missing", 400},
	{ProblemKeyInvalid, "Idempotency-Key header invalid", 400},
	{ProblemKeyReused, "Idempotency-Key reused with a different request", 422},
	{ProblemInProgress, "Request with this Idempotency-Key still in progress", 409},
	{ProblemPayloadTooLarge, "Request body too large", 413},
	{ProblemStoreUnavailable, "Idempotency store unavailable", 503},
	{ProblemBodyUnreadable, "Request body unreadable", 400},
	{ProblemStoreFull, "Too many idempotency records held", 429},
}

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
