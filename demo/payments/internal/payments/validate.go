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

// ValidAccount reports, wrapped in ErrInvalid, why account (the bearer
// token) cannot name an account, or nil.
func ValidAccount(account string) error {
	if account == "" || !storable(account, accountSize) {
		return fmt.Errorf("%w: the bearer token names the account, so it must be UTF-8 text of at most %d bytes without NUL characters",
			ErrInvalid, accountSize)
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

// Validate reports the first problem with r, wrapped in ErrInvalid. A
// request it accepts can be written on every database the demo runs on.
func (r *ChargeRequest) Validate() error {
	switch {
	case r.Amount <= 0 || r.Amount > MaxAmount:
		return fmt.Errorf("%w: amount must be a positive integer number of cents, at most %d", ErrInvalid, MaxAmount)
	case !isCurrency(r.Currency):
		return fmt.Errorf("%w: currency must be three lowercase letters", ErrInvalid)
	case strings.TrimSpace(r.Customer) == "" || !storable(r.Customer, customerSize):
		return fmt.Errorf("%w: customer must be a non-empty string of at most %d bytes without NUL characters", ErrInvalid, customerSize)
	case !storable(r.Description, descriptionSize):
		return fmt.Errorf("%w: description must be at most %d bytes without NUL characters", ErrInvalid, descriptionSize)
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
