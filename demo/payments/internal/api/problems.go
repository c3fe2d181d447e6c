package api

// The names of the demo's own problem types; idemkit's are the idem.Problem*
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
)

// ProblemNames lists the demo's own problem type names.
func ProblemNames() []string {
	return []string{
		ProblemInvalidRequest, ProblemUnauthorized, ProblemCardDeclined, ProblemRefundTooLarge, ProblemNotFound,
		ProblemMethodNotAllowed, ProblemProviderUnavailable, ProblemLeaseLost, ProblemDatabaseUnavailable,
		ProblemTimedOut, ProblemClientClosedRequest, ProblemInternalError,
	}
}

// retryAfter is the Retry-After of the demo's own 503 answers, in seconds:
// each says that the same request, retried with its key, may succeed.
const retryAfter = "1"
