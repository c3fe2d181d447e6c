package payments

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Sizes of the text columns, in characters; the checks below count bytes,
// which is stricter.
const (
	idSize          = 40
	accountSize     = 200
	customerSize    = 200
	descriptionSize = 1000
)

// MaxAmount is the largest amount of one charge, in cents: large enough
// for any payment, small enough that an account's sums stay far inside the
// 64-bit integers every database adds them in.
const MaxAmount = 99_999_999

// storable reports whether s can be written to a text column of n
// characters on every database the demo runs on: PostgreSQL refuses NUL
// and invalid UTF-8, MySQL in strict mode refuses invalid UTF-8, and
// PostgreSQL and MySQL refuse text longer than the column.
func storable(s string, n int) bool {
	return len(s) <= n && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// FieldError says what is wrong with one part of a request: a member of
// its JSON body (Pointer, a JSON Pointer as a URI fragment, as in RFC
// 9457's example: "#/amount", or "#" for the whole body), a query
// parameter or a header field. Exactly one of the three is set.
type FieldError struct {
	Pointer   string `json:"pointer,omitempty"`
	Parameter string `json:"parameter,omitempty"`
	Header    string `json:"header,omitempty"`
	// Detail says what the part must be, for a person to read.
	Detail string `json:"detail"`
}

// String names the part and says what is wrong with it.
func (f FieldError) String() string {
	switch {
	case f.Parameter != "":
		return "the query parameter " + f.Parameter + " " + f.Detail
	case f.Header != "":
		return "the " + f.Header + " header " + f.Detail
	case f.Pointer == "#" || f.Pointer == "":
		return "the body " + f.Detail
	}
	return strings.TrimPrefix(f.Pointer, "#/") + " " + f.Detail
}

// InvalidError is a request refused as invalid, with everything wrong with
// it. It wraps ErrInvalid.
type InvalidError struct {
	Errors []FieldError
}

// Invalid returns the InvalidError of problems.
func Invalid(problems ...FieldError) error { return &InvalidError{Errors: problems} }

func (e *InvalidError) Error() string { return ErrInvalid.Error() + ": " + e.Summary() }

// Summary says everything wrong with the request in one line.
func (e *InvalidError) Summary() string {
	parts := make([]string, len(e.Errors))
	for i, f := range e.Errors {
		parts[i] = f.String()
	}
	return strings.Join(parts, "; ")
}

// Unwrap returns ErrInvalid.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// ValidAccount reports, as an InvalidError, why account (the bearer token)
// cannot name an account, or nil.
func ValidAccount(account string) error {
	if account == "" || !storable(account, accountSize) {
		return Invalid(FieldError{Header: "Authorization", Detail: fmt.Sprintf(
			"must carry a bearer token of UTF-8 text of at most %d bytes without NUL characters: it names the account", accountSize)})
	}
	return nil
}

// ChargeRequest is the body of POST /v1/charges.
type ChargeRequest struct {
	Amount      int64  `json:"amount"`
	Currency    string `json:"currency"`
	Customer    string `json:"customer"`
	Description string `json:"description"`
}

// Validate reports every problem with r as an InvalidError, or nil. A
// request it accepts can be written on every database the demo runs on.
func (r *ChargeRequest) Validate() error {
	var problems []FieldError
	check := func(ok bool, member, detail string) {
		if !ok {
			problems = append(problems, FieldError{Pointer: "#/" + member, Detail: detail})
		}
	}
	check(r.Amount > 0 && r.Amount <= MaxAmount, "amount", fmt.Sprintf("must be a positive integer number of cents, at most %d", MaxAmount))
	check(isCurrency(r.Currency), "currency", "must be three lowercase letters")
	check(strings.TrimSpace(r.Customer) != "" && storable(r.Customer, customerSize), "customer",
		fmt.Sprintf("must be a non-empty string of at most %d bytes without NUL characters", customerSize))
	check(storable(r.Description, descriptionSize), "description", fmt.Sprintf("must be at most %d bytes without NUL characters", descriptionSize))
	if problems != nil {
		return Invalid(problems...)
	}
	return nil
}

func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for i := range 3 {
		if s[i] < 'a' || s[i] > 'z' {
			return false
		}
	}
	return true
}
