package idem

import "github.com/idemkit/idemkit/core/exchange"

type problemSpec struct {
	name   string
	title  string
	status int
}

// The titles are stable per type: clients may show them, and the detail
// carries what is specific to one request.
var problemSpecs = [...]problemSpec{
	{exchange.ProblemKeyMissing, "Idempotency-Key header missing", 400},
	{exchange.ProblemKeyInvalid, "Idempotency-Key header invalid", 400},
	{exchange.ProblemKeyReused, "Idempotency-Key reused with a different request", 422},
	{exchange.ProblemInProgress, "Request with this Idempotency-Key still in progress", 409},
	{exchange.ProblemPayloadTooLarge, "Request body too large", 413},
	{exchange.ProblemStoreUnavailable, "Idempotency store unavailable", 503},
	{exchange.ProblemBodyUnreadable, "Request body unreadable", 400},
	{exchange.ProblemStoreFull, "Too many idempotency records held", 429},
}
