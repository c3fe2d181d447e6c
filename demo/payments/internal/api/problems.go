package api

// The names of the demo's own problem types; idemkit's are the exchange.Problem*
// constants. A type URI is DocsPath + "/" + name, and the policy page has a
// section whose id is the name.
const (
	ProblemInvalidRequest      = "invalid-request"
	ProblemUnauthorized        = "unauthorized"
	ProblemCardDeclined        = "card-declined"
	ProblemRefundTooLarge      = "refund-too-large"
	ProblemNotFound            = "not-found"
	ProblemMethodNotAllowed    = "method-not-allowed"
	ProblemProviderUnavailable = "provider-unavailable"
	ProblemLeaseLost           = "lease-lost"
	ProblemDatabaseUnavailable = "database-unavailable"
	ProblemTimedOut            = "timed-out"
	ProblemClientClosedRequest = "client-closed-request"
	ProblemInternalError       = "internal-error"
	// The webhook receiver's: a webhook that is not signed as it must be
	// (records nothing), and an event the ledger refuses for good.
	ProblemWebhookSignatureInvalid = "webhook-signature-invalid"
	ProblemWebhookTimestampStale   = "webhook-timestamp-stale"
	ProblemEventRejected           = "event-rejected"
	// A webhook whose body comes with a content coding (gzip): refused,
	// recording nothing, so that every framework checks and applies the
	// same bytes.
	ProblemWebhookEncodingUnsupported = "webhook-encoding-unsupported"
)

// ProblemNames lists the demo's own problem type names.
func ProblemNames() []string {
	return []string{
		ProblemInvalidRequest, ProblemUnauthorized, ProblemCardDeclined, ProblemRefundTooLarge, ProblemNotFound,
		ProblemMethodNotAllowed, ProblemProviderUnavailable, ProblemLeaseLost, ProblemDatabaseUnavailable,
		ProblemTimedOut, ProblemClientClosedRequest, ProblemInternalError,
		ProblemWebhookSignatureInvalid, ProblemWebhookTimestampStale, ProblemEventRejected, ProblemWebhookEncodingUnsupported,
	}
}

// retryAfter is the Retry-After of the demo's own 503 answers, in seconds:
// each says that the same request, retried with its key, may succeed.
const retryAfter = "1"
