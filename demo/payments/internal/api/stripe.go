package api

// Stripe's clients. POST /v1/charges and POST /v1/refunds also take what
// Stripe's SDKs send, an application/x-www-form-urlencoded body with
// Stripe's parameter names, and such a request is answered in Stripe's
// shapes. The handlers and idemkit do not know the difference: the form
// is decoded into the same request (decodeForm), the same Engine decides,
// the same answer is recorded, and StripeRender turns whatever answer the
// request got (the handler's, idemkit's, a replay, a 401) into Stripe's
// shape at the edge. It is a pure function of the request's form and the
// answer, so a replay renders byte for byte what the first answer did.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idemkit/core/exchange"

	"github.com/idemkit/idemkit/demo/payments/internal/payments"
)

// formType is the media type of Stripe's request bodies.
const formType = "application/x-www-form-urlencoded"

// IsStripeRequest reports whether a request is one of Stripe's clients':
// a POST of a form to /v1/charges or /v1/refunds.
func IsStripeRequest(method, path, contentType string) bool {
	return method == http.MethodPost && (path == "/v1/charges" || path == "/v1/refunds") && isForm(contentType)
}

func isForm(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == formType
}

// Stripe's metadata limits: keys, key length, value length.
const (
	maxMetadataKeys  = 50
	maxMetadataKey   = 40
	maxMetadataValue = 500
)

// decodeForm reads a form body, Stripe's parameters, into v (a
// *payments.ChargeRequest or *payments.RefundRequest). Errors name the
// parameter at fault with a pointer, as for JSON: "#/amount",
// "#/metadata/order_id".
func decodeForm(r io.Reader, v any) error {
	body, err := io.ReadAll(io.LimitReader(r, maxBody+1))
	if err != nil {
		return err
	}
	if len(body) > maxBody {
		return payments.Invalid(wholeBody(fmt.Sprintf("must be at most %d bytes", maxBody)))
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return payments.Invalid(wholeBody("is not a valid form (application/x-www-form-urlencoded)"))
	}
	var problems []payments.FieldError
	bad := func(name, detail string) {
		problems = append(problems, payments.FieldError{Pointer: pointer(formPath(name)), Detail: detail})
	}
	get := func(name string) string {
		if len(form[name]) > 1 {
			bad(name, "must be given once")
		}
		return form.Get(name)
	}
	integer := func(name string) int64 {
		s := get(name)
		if s == "" {
			return 0 // refused by the request's own checks
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			bad(name, "must be an integer")
		}
		return n
	}
	var known []string
	switch req := v.(type) {
	case *payments.ChargeRequest:
		known = []string{"amount", "currency", "customer", "source", "payment_method", "description"}
		req.Amount = integer("amount")
		req.Currency = get("currency")
		req.Description = get("description")
		// The demo's charges name who pays: the customer, or the card.
		req.Customer = get("customer")
		for _, name := range []string{"source", "payment_method"} {
			if s := get(name); req.Customer == "" {
				req.Customer = s
			}
		}
		if req.Customer == "" {
			bad("customer", "must be given, or source or payment_method")
		}
	case *payments.RefundRequest:
		known = []string{"charge", "amount"}
		req.Charge = get("charge")
		req.Amount = integer("amount")
	default:
		panic(fmt.Sprintf("decodeForm: %T", v))
	}
	metadata := 0
	for _, name := range sortedNames(form) {
		if key, ok := metadataKey(name); ok {
			metadata++
			if key == "" || len(key) > maxMetadataKey {
				bad(name, fmt.Sprintf("must have a key of 1 to %d characters", maxMetadataKey))
			}
			if value := get(name); len(value) > maxMetadataValue {
				bad(name, fmt.Sprintf("must be at most %d characters", maxMetadataValue))
			}
			continue
		}
		if !contains(known, name) {
			bad(name, "is not a parameter this endpoint accepts")
		}
	}
	if metadata > maxMetadataKeys {
		bad("metadata", fmt.Sprintf("must have at most %d keys", maxMetadataKeys))
	}
	if problems != nil {
		return payments.Invalid(problems...)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sortedNames(form url.Values) []string {
	names := make([]string, 0, len(form))
	for name := range form {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// metadataKey returns k of a parameter named metadata[k].
func metadataKey(name string) (string, bool) {
	inner, ok := strings.CutPrefix(name, "metadata[")
	if !ok || !strings.HasSuffix(inner, "]") {
		return "", false
	}
	return strings.TrimSuffix(inner, "]"), true
}

// formPath is the pointer path of a form parameter: metadata[k] is
// metadata, k.
func formPath(name string) []string {
	if key, ok := metadataKey(name); ok {
		return []string{"metadata", key}
	}
	return []string{name}
}

// formParam is the Stripe parameter a pointer of decodeForm's or of the
// request's checks names: "#/metadata/k" is metadata[k], "#" none.
func formParam(ptr string) string {
	path := strings.TrimPrefix(ptr, "#")
	path = strings.TrimPrefix(path, "/")
	if path == "" {
		return ""
	}
	if p, err := url.PathUnescape(path); err == nil {
		path = p
	}
	parts := strings.SplitN(path, "/", 2)
	unescape := strings.NewReplacer("~1", "/", "~0", "~")
	if len(parts) == 2 {
		return parts[0] + "[" + unescape.Replace(parts[1]) + "]"
	}
	return unescape.Replace(parts[0])
}

// StripeError is the error object of Stripe's answers.
type StripeError struct {
	Type    string `json:"type"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
}

// stripeErrors maps each problem type name to Stripe's error type and
// code, and the status Stripe answers it with (0: the problem's own).
var stripeErrors = map[string]struct {
	status    int
	typ, code string
	retry     bool
}{
	exchange.ProblemKeyReused:        {400, "idempotency_error", "idempotency_key_reused", false},
	exchange.ProblemInProgress:       {0, "invalid_request_error", "idempotency_key_in_use", true},
	exchange.ProblemKeyMissing:       {0, "invalid_request_error", "idempotency_key_missing", false},
	exchange.ProblemKeyInvalid:       {0, "invalid_request_error", "idempotency_key_invalid", false},
	exchange.ProblemPayloadTooLarge:  {0, "invalid_request_error", "request_too_large", false},
	exchange.ProblemBodyUnreadable:   {0, "invalid_request_error", "request_body_unreadable", false},
	exchange.ProblemStoreUnavailable: {0, "api_error", "idempotency_store_unavailable", true},
	exchange.ProblemStoreFull:        {0, "api_error", "idempotency_store_full", true},
	ProblemInvalidRequest:            {0, "invalid_request_error", "parameter_invalid", false},
	ProblemUnauthorized:              {0, "invalid_request_error", "api_key_invalid", false},
	ProblemCardDeclined:              {0, "card_error", "card_declined", false},
	ProblemRefundTooLarge:            {0, "invalid_request_error", "amount_too_large", false},
	ProblemNotFound:                  {0, "invalid_request_error", "resource_missing", false},
}

// StripeAnswer is an answer rendered for one of Stripe's clients.
type StripeAnswer struct {
	Status int
	// Header holds the fields to set, over the answer's own.
	Header http.Header
	Body   []byte
}

// StripeRender renders the answer (status, Content-Type, body) to a
// Stripe request to path with form body in Stripe's shape: a charge or
// refund object for the handler's 201, Stripe's error object for a
// problem. Any other answer is left as it is.
func StripeRender(path string, form url.Values, status int, contentType string, body []byte) StripeAnswer {
	h := http.Header{}
	h.Set("Request-Id", requestID())
	mt, _, _ := mime.ParseMediaType(contentType)
	switch {
	case status == http.StatusCreated && mt == "application/json":
		if out, ok := stripeObject(path, form, body); ok {
			return StripeAnswer{Status: http.StatusOK, Header: h, Body: out}
		}
	case mt == exchange.ProblemContentType:
		var p struct {
			Type   string                `json:"type"`
			Detail string                `json:"detail"`
			Errors []payments.FieldError `json:"errors"`
		}
		if json.Unmarshal(body, &p) != nil {
			break
		}
		name := p.Type[strings.LastIndexAny(p.Type, "/#")+1:]
		m, ok := stripeErrors[name]
		if !ok {
			m.typ, m.code, m.retry = "invalid_request_error", name, false
			if status >= 500 {
				m.typ, m.retry = "api_error", true
			}
		}
		e := StripeError{Type: m.typ, Code: m.code, Message: p.Detail}
		if len(p.Errors) > 0 {
			e.Param = formParam(p.Errors[0].Pointer)
			if e.Param == "" {
				e.Param = p.Errors[0].Parameter
			}
			if e.Param == "customer" && form.Get("customer") == "" {
				e.Code = "parameter_missing"
			}
		}
		if name == ProblemNotFound && path == "/v1/refunds" {
			e.Param = "charge"
		}
		if m.status != 0 {
			status = m.status
		}
		if m.retry {
			h.Set("Stripe-Should-Retry", "true")
		} else {
			h.Set("Stripe-Should-Retry", "false")
		}
		h.Set("Content-Type", "application/json")
		return StripeAnswer{Status: status, Header: h, Body: mustJSON(map[string]StripeError{"error": e})}
	}
	return StripeAnswer{Status: status, Header: h, Body: body}
}

// stripeCharge and stripeRefund are the fields of Stripe's charge and
// refund objects that the demo has: each rendered from the demo's own
// answer and the request's form, which alone knows the metadata and the
// payment method (the demo keeps neither).
type stripeCharge struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCaptured     int64             `json:"amount_captured"`
	AmountRefunded     int64             `json:"amount_refunded"`
	BalanceTransaction *string           `json:"balance_transaction"`
	Captured           bool              `json:"captured"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Customer           *string           `json:"customer"`
	Description        *string           `json:"description"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	Paid               bool              `json:"paid"`
	PaymentMethod      *string           `json:"payment_method"`
	Refunded           bool              `json:"refunded"`
	Status             string            `json:"status"`
}

type stripeRefund struct {
	ID       string            `json:"id"`
	Object   string            `json:"object"`
	Amount   int64             `json:"amount"`
	Charge   string            `json:"charge"`
	Created  int64             `json:"created"`
	Metadata map[string]string `json:"metadata"`
	Status   string            `json:"status"`
}

// stripeObject renders the handler's charge or refund (its first answer)
// as Stripe's object.
func stripeObject(path string, form url.Values, body []byte) ([]byte, bool) {
	metadata := map[string]string{}
	for name := range form {
		if key, ok := metadataKey(name); ok {
			metadata[key] = form.Get(name)
		}
	}
	if path == "/v1/refunds" {
		var v payments.RefundView
		if json.Unmarshal(body, &v) != nil {
			return nil, false
		}
		return mustJSON(stripeRefund{ID: v.ID, Object: "refund", Amount: v.Amount, Charge: v.Charge,
			Created: unix(v.Created), Metadata: metadata, Status: "succeeded"}), true
	}
	var v payments.ChargeView
	if json.Unmarshal(body, &v) != nil {
		return nil, false
	}
	// A charge's first answer: captured in full, nothing refunded yet.
	return mustJSON(stripeCharge{ID: v.ID, Object: "charge", Amount: v.Amount, AmountCaptured: v.Amount,
		Captured: true, Created: unix(v.Created), Currency: v.Currency, Customer: optional(form.Get("customer")),
		Description: optional(v.Description), Metadata: metadata, Paid: true,
		PaymentMethod: optional(first(form.Get("payment_method"), form.Get("source"))), Status: "succeeded"}), true
}

func first(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func unix(rfc3339 string) int64 {
	t, err := time.Parse(time.RFC3339, rfc3339)
	if err != nil {
		return 0
	}
	return t.Unix()
}

// requestID is a fresh Request-Id value.
func requestID() string {
	var b [12]byte
	rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// StripeForm reads the form of a Stripe request's body, which it leaves
// in r for the handlers to read again. A body too large to be one, or
// not a form, gives an empty form.
func StripeForm(r *http.Request) url.Values {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	r.Body = readCloser{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
	return parseStripeForm(body, err)
}

// ParseStripeForm is StripeForm for a body read already.
func ParseStripeForm(body []byte) url.Values { return parseStripeForm(body, nil) }

func parseStripeForm(body []byte, err error) url.Values {
	if err != nil || len(body) > maxBody {
		return url.Values{}
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return url.Values{}
	}
	return form
}

type readCloser struct {
	io.Reader
	io.Closer
}

// StripeEdge renders the answers to Stripe's clients (IsStripeRequest) in
// Stripe's shape (StripeRender), and passes every other request through
// untouched. It goes outside authentication and idemkit's middleware, so
// that their answers are rendered too.
func StripeEdge(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !IsStripeRequest(r.Method, r.URL.Path, r.Header.Get("Content-Type")) {
			next.ServeHTTP(w, r)
			return
		}
		form := StripeForm(r)
		rec := &bufferWriter{header: http.Header{}, conn: w}
		next.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		ans := StripeRender(r.URL.Path, form, rec.status, rec.header.Get("Content-Type"), rec.body.Bytes())
		h := w.Header()
		for k, v := range rec.header {
			h[k] = v
		}
		for k, v := range ans.Header {
			h[k] = v
		}
		h.Del("Link") // the problem's, which Stripe's errors do not have
		h.Set("Content-Length", strconv.Itoa(len(ans.Body)))
		w.WriteHeader(ans.Status)
		w.Write(ans.Body)
	})
}

// bufferWriter keeps an answer, to render it before it is sent. It
// unwraps to the writer of the connection (http.ResponseController), so
// that what idemkit does to withhold an outcome that was not recorded
// (a write deadline in the past) reaches the connection, whatever recovery
// middleware stands between; a flush has nothing to send yet.
type bufferWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
	conn   http.ResponseWriter
}

func (b *bufferWriter) Unwrap() http.ResponseWriter { return b.conn }

// FlushError buffers: the answer is sent once rendered.
func (b *bufferWriter) FlushError() error { return nil }

func (b *bufferWriter) Header() http.Header { return b.header }

func (b *bufferWriter) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *bufferWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}
