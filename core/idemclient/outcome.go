package idemclient

import (
	"context"
	"net/http"

	"github.com/idemkit/idemkit/core/exchange"
)

const replayedHeader = exchange.ReplayedHeader

// Result says what the Transport did for one request.
type Result struct {
	// Key is the idempotency key header value sent with every attempt,
	// exactly as sent (a generated key is a quoted sf-string), or "" for a
	// request sent without a key. For a request following a redirect, it
	// is the key derived for the new target (see the package doc).
	Key string
	// Attempts is the number of attempts sent, the first included.
	Attempts int
	// Replayed reports that the server answered with a response it had
	// recorded for an earlier attempt (header Idempotent-Replayed: true):
	// the operation ran once, before this answer.
	Replayed bool
}

type resultKey struct{}

func resultFrom(ctx context.Context) *Result {
	r, _ := ctx.Value(resultKey{}).(*Result)
	return r
}

// Outcome returns the Result of the request that produced resp. It reports
// false for a response the Transport did not retry-manage (methods sent
// once, or a response from another RoundTripper). When an http.Client
// follows redirects, resp is the last hop's, and so is its Result.
func Outcome(resp *http.Response) (Result, bool) {
	if resp == nil || resp.Request == nil {
		return Result{}, false
	}
	r := resultFrom(resp.Request.Context())
	if r == nil {
		return Result{}, false
	}
	return *r, true
}
