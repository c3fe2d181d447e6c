// Package idemclient is the client side of idemkit: an http.RoundTripper
// that makes POST and PATCH requests safe to retry by sending an
// Idempotency-Key, and retries them, with that same key, when the answer or
// the lack of one says a retry may succeed.
//
//	client := idemclient.NewClient(idemclient.Config{})
//	resp, err := client.Post(url, "application/json", strings.NewReader(body))
//	if err != nil { ... }
//	defer resp.Body.Close()
//	if out, ok := idemclient.Outcome(resp); ok && out.Replayed { ... }
//
// # Which requests, which answers
//
// Requests whose method is in Config.KeyMethods (POST and PATCH by default,
// as on the server) get a fresh key, a random UUIDv4 sent as an RFC 9651
// sf-string, unless they already carry one; every attempt of the request
// carries the same key, so the server runs the operation at most once
// however many attempts reach it. They are retried on:
//
//   - network errors and timeouts (the request may or may not have reached
//     the server: the key makes a second attempt harmless);
//   - 5xx, 408, 425 and 429, which the server did not record;
//   - 409, which idemkit sends while the first attempt is still running.
//
// Answers and errors that every attempt would meet again are not retried:
// 501, 505, 506, 508, 510 and 511 (the server or a proxy cannot serve the
// request as sent), and errors from a request the base RoundTripper will
// not send (an unsupported scheme, a URL without a host, an address or
// proxy URL that does not parse, a header field name or value that cannot
// go on the wire) or from a TLS peer the client rejects. They are returned
// after the first attempt.
//
// GET, HEAD, OPTIONS, TRACE, PUT and DELETE are idempotent by HTTP semantics
// (RFC 9110, section 9.2.2), so they are retried on the same answers without
// a key, except 409: for them it reports a real conflict with the resource's
// state, which no retry resolves. Any other method, and any request asking
// for a protocol upgrade, is sent once, untouched.
//
// No other 4xx is retried: a 400, 404 or 422 (the key was used with another
// payload) says the request itself must change.
//
// A base RoundTripper answering a response without a Body is taken to
// have sent an empty one; one answering neither a response nor an error
// gets an [*Error] back, without a retry.
//
// # Keys
//
// A key the caller set is found under any spelling of the header name:
// net/http sends a name assigned directly to the Header map, such as
// "idempotency-key", as it is, not canonicalised. Each attempt carries the
// key on exactly one field line, under the canonical name. The same key
// set twice counts once; a request carrying two different keys is refused,
// before anything is sent, with [ErrMultipleKeys].
//
// An http.Client following a 307 or 308 redirect sends the request again,
// to the new location, with the original request's headers. A key the
// caller set would so reach another target, where an idemkit server
// answers 422 (the key was used on another path) or, on the same path,
// replays the recorded redirect. A different URL is a different operation:
// the redirected request gets a key of its own, derived from the caller's
// key, the method and the new URL (a SHA-256 in hex, as an sf-string). A
// caller retrying the whole call with its key derives the same one, so the
// redirected operation runs once as well. A key a CheckRedirect function
// set on the redirected request is the caller's choice, and is kept; a
// request whose original had no key gets a fresh one. [Outcome] reports
// the key sent on the last hop. A 301, 302 or 303 turns a POST into a GET,
// which gets no key, and whose copied key header is left as it is (a
// server ignores a key on a GET).
//
// # Timing
//
// A Retry-After header (delay-seconds or HTTP-date) on a retried answer sets
// the wait; otherwise the wait is exponential backoff with full jitter: a
// uniformly random duration below min(MaxBackoff, BaseBackoff·2^(n-1)) after
// the n-th attempt. No wait is longer than MaxBackoff, whatever the Budget:
// a Retry-After asking for more is not cut short, since an earlier retry
// would only meet the same 429 or 503; the answer is handed back with its
// Retry-After for the caller to act on.
//
// Retrying stops after MaxAttempts attempts; when the wait before the next
// attempt would end later than Budget after the first attempt began, or at
// or after the deadline of the request's context; and at once when the
// request's context ends. A wait that could not be completed is never
// started: the caller gets the last answer at once, rather than a context
// error after sleeping to its deadline, so a deadline shorter than a
// server's Retry-After still shows the server's 409, 429 or 503. An answer
// that is retried has its body read and discarded, up to 64 KiB, so that
// its connection serves the next attempt; that read stops after a second,
// or earlier when the budget or the deadline leaves less time before the
// wait, and the connection is then closed instead: a server trickling its
// body cannot hold the next attempt past the budget. When
// retrying stops on a response, that response is returned as it is, body
// unread and headers intact (a 503 is still a response; read it before the
// deadline, as net/http ties a body to the request's context); when it
// stops on an error, the error is an [*Error] carrying the last attempt's
// error, or the context's if the context ended first.
//
// # What happened
//
// [Outcome] reads, from a response the Transport returned, the key sent, the
// number of attempts and whether the answer is a replay of a response
// recorded earlier (the Idempotent-Replayed: true header). Errors carry the
// same numbers in [*Error].
package idemclient
