package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"github.com/idemkit/idemkit/demo/payments/internal/payments"
)

// maxBody is the largest request body the API reads.
const maxBody = 64 << 10

// decode reads the request's JSON body, one object, into v, a pointer to
// one of the payments request structs. Whatever is wrong with the body
// comes back as a payments.InvalidError that names the member at fault and
// says what it must be in the body's own terms, JSON Pointers and JSON
// kinds: the Go types behind them are no business of the client's.
//
// A form body (Stripe's clients', see IsStripeRequest) is read by
// decodeForm instead, Stripe's parameters into the same struct.
func decode(r *http.Request, v any) error {
	if IsStripeRequest(r.Method, r.URL.Path, r.Header.Get("Content-Type")) {
		return decodeForm(r.Body, v)
	}
	return decodeJSON(r.Body, v)
}

// decodeJSON is decode for a body read from r: an HTTP request's, or a
// gRPC request message written as JSON.
func decodeJSON(r io.Reader, v any) error {
	body := &io.LimitedReader{R: r, N: maxBody + 1}
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, next := dec.Token(); next != io.EOF {
			err = errTrailing
		}
	}
	switch {
	case err == nil:
		return nil
	case body.N == 0:
		return payments.Invalid(wholeBody(fmt.Sprintf("must be at most %d bytes", maxBody)))
	}
	return payments.Invalid(decodeProblem(err))
}

var errTrailing = errors.New("data after the JSON object")

func wholeBody(detail string) payments.FieldError {
	return payments.FieldError{Pointer: "#", Detail: detail}
}

// decodeProblem says what err, from decoding a body with encoding/json,
// found wrong, without a word of its message, which names Go types.
func decodeProblem(err error) payments.FieldError {
	var syntax *json.SyntaxError
	var kind *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return wholeBody("is empty: it must be a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return wholeBody("ends before its JSON object does")
	case errors.Is(err, errTrailing):
		return wholeBody("must be one JSON object, with nothing after it")
	case errors.As(err, &syntax):
		return wholeBody(fmt.Sprintf("is not valid JSON (at byte %d)", syntax.Offset))
	case errors.As(err, &kind) && kind.Field == "":
		return wholeBody("must be a JSON object, not " + jsonValue(kind.Value))
	case errors.As(err, &kind):
		return payments.FieldError{Pointer: pointer(strings.Split(kind.Field, ".")), Detail: "must be " + jsonKind(kind.Type) + ", not " + jsonValue(kind.Value)}
	}
	// encoding/json has no error type of its own for an unknown member.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		if name, uerr := strconv.Unquote(name); uerr == nil {
			return payments.FieldError{Pointer: pointer([]string{name}), Detail: "is not a member this endpoint accepts"}
		}
	}
	return wholeBody("is not a JSON object of the expected form")
}

// pointer is the JSON Pointer (RFC 6901) to the member at path, as a URI
// fragment (RFC 9457's example): "#/amount".
func pointer(path []string) string {
	var b strings.Builder
	b.WriteByte('#')
	for _, name := range path {
		b.WriteByte('/')
		// Escaped for the pointer, then for the fragment.
		b.WriteString(fragment.Replace(strings.NewReplacer("~", "~0", "/", "~1").Replace(name)))
	}
	return b.String()
}

// fragment escapes what a URI fragment may not hold as it is.
var fragment = strings.NewReplacer("%", "%25", " ", "%20", `"`, "%22", "#", "%23", "<", "%3C", ">", "%3E",
	`\`, "%5C", "^", "%5E", "`", "%60", "{", "%7B", "|", "%7C", "}", "%7D")

// jsonKind names, in JSON's terms, what a value of type t is written as.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return "an object"
}

// jsonValue describes a JSON value as encoding/json's UnmarshalTypeError
// does ("string", "array", "number 1.5"), for a person.
func jsonValue(v string) string {
	switch kind, number, _ := strings.Cut(v, " "); kind {
	case "number":
		if number != "" {
			return number
		}
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "array":
		return "an array"
	case "object":
		return "an object"
	}
	return "null"
}
