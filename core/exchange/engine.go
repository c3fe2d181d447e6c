package exchange

import (
	"context"
	"net/http"
)

// Engine is an idem.Engine as an adapter uses it: idem.Engine.Adapter
// returns it. Get it once, when the adapter's middleware is made.
type Engine interface {
	// Begin decides what to do with a request (see Decision). It never
	// returns an error: every failure becomes a problem response (or, with
	// Config.FailOpen, a pass-through). r is taken by value: through an
	// interface a pointer would make every request's Request escape to
	// the heap.
	Begin(ctx context.Context, r Request) Decision
	// Guards reports whether requests with this method are subject to
	// idempotency; adapters let other requests through without building a
	// Request.
	Guards(method string) bool
	// HeaderName returns the canonical name of the key header.
	HeaderName() string
	// HTTPRequest describes r to the Engine (see the function HTTPRequest),
	// with the Engine's key header.
	HTTPRequest(r *http.Request) Request
	// WithheldResponse is what an adapter that can still replace the
	// handler's response sends instead of one that must be withheld
	// (Finished.Withhold: its work was rolled back, or another request
	// holds its key now): a 503 store-unavailable problem with
	// Retry-After, which the client retries with its key. Adapters whose
	// response may already be under way abort it instead (ResponseCapture
	// does).
	WithheldResponse() Response
	// BodyTooLarge is the 413 payload-too-large problem for a request body
	// over limit bytes: what Begin answers for a body over
	// Config.MaxRequestBody. An adapter whose framework enforces a body
	// limit of its own, before the request reaches idemkit, answers it
	// too, so that a client meets the same problem whichever limit its
	// body crossed.
	BodyTooLarge(limit int64) Response
}
