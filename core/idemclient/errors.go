package idemclient

import (
	"errors"
	"strconv"
)

// ErrBodyNotRewindable is returned, before anything is sent, for a request
// that may be retried but whose body cannot be read again: it has a Body
// and no GetBody. http.NewRequest sets GetBody for *bytes.Buffer,
// *bytes.Reader and *strings.Reader bodies; set it yourself for others, or
// use MaxAttempts 1.
var ErrBodyNotRewindable = errors.New("idemclient: the request body cannot be rewound for a retry (Request.GetBody is nil)")

// ErrMultipleKeys is returned, before anything is sent, for a request
// carrying two different idempotency keys (on several field lines, or under
// several spellings of the header name): which operation it is cannot be
// told, and a server would refuse it with 400 anyway.
var ErrMultipleKeys = errors.New("idemclient: the request carries more than one idempotency key")

// Error is returned when no attempt produced a response: the last
// attempt's error or the context's, with what happened before it. It
// unwraps to that error, so errors.Is(err, context.Canceled) and the like
// work through it (and through the *url.Error an http.Client adds).
type Error struct {
	// Attempts is the number of attempts sent (0 if the context had ended
	// before the first).
	Attempts int
	// Key is the idempotency key sent, "" for requests sent without one.
	Key string
	// Err is the last attempt's error, or the context's.
	Err error
}

// Error says how many attempts were made before the last error.
func (e *Error) Error() string {
	return "idemclient: " + strconv.Itoa(e.Attempts) + " attempt(s): " + e.Err.Error()
}

// Unwrap returns e.Err.
func (e *Error) Unwrap() error { return e.Err }

// permanentError marks an error no retry can cure.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }
