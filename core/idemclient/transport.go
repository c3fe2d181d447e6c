package idemclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"
)

// Transport is an http.RoundTripper that adds idempotency keys and retries.
// It is safe for concurrent use.
type Transport struct {
	cfg Config
}

var _ http.RoundTripper = (*Transport)(nil)

// New returns a Transport for cfg, with defaults for its zero fields.
func New(cfg Config) *Transport {
	cfg.setDefaults()
	cfg.KeyMethods = slices.Clone(cfg.KeyMethods) // the caller's slice may change later
	return &Transport{cfg: cfg}
}

// NewClient returns an http.Client whose Transport is New(cfg). It sets no
// Client.Timeout, which would cut the retries short: bound the whole call
// with Config.Budget and the request's context instead.
func NewClient(cfg Config) *http.Client {
	return &http.Client{Transport: New(cfg)}
}

// requestKind says how a request is treated.
type requestKind uint8

const (
	sendOnce   requestKind = iota // sent once, untouched
	idempotent                    // retried without a key, not on 409
	keyed                         // carries a key, retried on 409 too
)

func (t *Transport) kind(req *http.Request) requestKind {
	if req.Header.Get("Upgrade") != "" {
		return sendOnce // a switched protocol is no longer a request/response exchange
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	if slices.Contains(t.cfg.KeyMethods, method) {
		return keyed
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return idempotent
	}
	return sendOnce
}

// RoundTrip sends req, retrying as the package documentation describes. It
// never modifies req: each attempt is a clone carrying the key and a fresh
// copy of the body.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	kind := t.kind(req)
	if kind == sendOnce {
		return t.cfg.Base.RoundTrip(req)
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	var key string
	if kind == keyed {
		k, found, err := t.callerKey(req.Header)
		if err != nil {
			if hasBody {
				_ = req.Body.Close() // a RoundTripper closes the body, even when refusing
			}
			return nil, err
		}
		switch {
		case !found:
			k = NewKey()
		case req.Response != nil:
			k = t.hopKey(req, k)
		}
		key = k
	}
	if hasBody && req.GetBody == nil && t.cfg.MaxAttempts > 1 {
		_ = req.Body.Close()
		return nil, ErrBodyNotRewindable
	}

	res := &Result{Key: key}
	ctx := context.WithValue(req.Context(), resultKey{}, res)
	start := t.cfg.Now()
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			if attempt == 1 && hasBody {
				_ = req.Body.Close()
			}
			return nil, &Error{Attempts: attempt - 1, Key: key, Err: err}
		}
		res.Attempts = attempt
		resp, err := t.attempt(ctx, req, attempt, hasBody, kind == keyed, key)
		if err != nil && ctx.Err() != nil {
			return nil, &Error{Attempts: attempt, Key: key, Err: withContextErr(ctx, err)}
		}
		wait, retry := t.retryWait(kind, req, key, resp, err, attempt)
		if !retry || attempt >= t.cfg.MaxAttempts || !t.canWait(ctx, start, wait) {
			if err != nil {
				return nil, &Error{Attempts: attempt, Key: key, Err: err}
			}
			return deliver(ctx, resp, req), nil
		}
		discard(resp, t.drainTime(ctx, start, wait))
		if err := t.cfg.Sleep(ctx, wait); err != nil {
			return nil, &Error{Attempts: attempt, Key: key, Err: err}
		}
	}
}

// callerKey returns the key the caller set in h, under any spelling of the
// header name: a direct map assignment such as h["idempotency-key"] is not
// canonicalised by net/http, which sends the name as it is. The same value
// repeated, under one spelling or several, is one key; two different values
// are ErrMultipleKeys, as the Transport cannot tell which operation is meant.
func (t *Transport) callerKey(h http.Header) (key string, found bool, err error) {
	for name, values := range h {
		if !t.isKeyHeader(name) {
			continue
		}
		for _, v := range values {
			if found && v != key {
				return "", false, ErrMultipleKeys
			}
			key, found = v, true
		}
	}
	return key, found, nil
}

// isKeyHeader reports whether name is a spelling of the key header's name.
// CanonicalHeaderKey folds ASCII letters only, and leaves a name that is
// not a token as it is, so no other name matches.
func (t *Transport) isKeyHeader(name string) bool {
	return name == t.cfg.HeaderName || http.CanonicalHeaderKey(name) == t.cfg.HeaderName
}

// attempt sends one clone of req. Attempts after the first get a fresh
// body from GetBody: the previous one was consumed and closed. A keyed
// attempt carries key on one field line under the canonical name, whatever
// spellings the caller used.
//
// Each attempt has a context of its own, which ends when its response body
// is closed, or earlier: after AttemptTimeout, or when discard stops
// reading the body of an answer that is not returned.
func (t *Transport) attempt(ctx context.Context, req *http.Request, n int, hasBody, keyed bool, key string) (*http.Response, error) {
	var cancel context.CancelFunc
	if t.cfg.AttemptTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, t.cfg.AttemptTimeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	r := req.Clone(ctx)
	if keyed {
		for name := range r.Header {
			if t.isKeyHeader(name) {
				delete(r.Header, name)
			}
		}
		r.Header[t.cfg.HeaderName] = []string{key}
	}
	if n > 1 && hasBody {
		body, err := req.GetBody()
		if err != nil {
			cancel()
			return nil, permanentError{fmt.Errorf("idemclient: rewinding the request body: %w", err)}
		}
		r.Body = body
	}
	resp, err := t.cfg.Base.RoundTrip(r)
	switch {
	case err != nil:
	case resp == nil:
		// A broken base: nothing to retry on, and nothing to return.
		err = permanentError{fmt.Errorf("idemclient: the base RoundTripper (%T) returned neither a response nor an error", t.cfg.Base)}
	case resp.Body == nil:
		// Some RoundTrippers, fakes mostly, leave Body nil for an empty
		// one; http.Client fills it in too, but only for its own callers.
		resp.Body = http.NoBody
	}
	if err != nil {
		cancel()
	} else {
		// The context covers reading the body: it ends when the body is closed.
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	}
	return resp, err
}

// deliver completes the Result held by ctx and makes it reachable from
// resp.Request, where Outcome looks for it.
func deliver(ctx context.Context, resp *http.Response, req *http.Request) *http.Response {
	res := resultFrom(ctx)
	res.Replayed = resp.Header.Get(replayedHeader) == "true"
	switch {
	case resp.Request == nil:
		// The base RoundTripper did not say what it sent.
		resp.Request = req.WithContext(ctx)
	case resultFrom(resp.Request.Context()) != res:
		// It reported a request of its own making, without the Result.
		resp.Request = resp.Request.WithContext(context.WithValue(resp.Request.Context(), resultKey{}, res))
	}
	return resp
}

// CloseIdleConnections closes the idle connections of the base
// RoundTripper, if it keeps any; http.Client.CloseIdleConnections calls it.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.cfg.Base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// maxDrain and maxDrainTime bound the bytes read from a discarded response
// to keep its connection, and the time spent reading them: past either,
// closing the connection and opening another is cheaper than reading on.
const (
	maxDrain     = 64 << 10
	maxDrainTime = time.Second
)

// drainTime is how long the body of an answer that is not returned may be
// read before the wait d that comes next: at most maxDrainTime, and never
// into the time that the budget and ctx's deadline leave for that wait, so
// that a server trickling its body cannot push the next attempt later than
// the budget allows. It is 0 or less when no time is left.
func (t *Transport) drainTime(ctx context.Context, start time.Time, d time.Duration) time.Duration {
	left := maxDrainTime
	if t.cfg.Budget >= 0 {
		left = min(left, t.cfg.Budget-t.cfg.Now().Sub(start)-d)
	}
	if dl, ok := ctx.Deadline(); ok {
		left = min(left, time.Until(dl)-d)
	}
	return left
}

// discard drains and closes a response that is not returned, so that its
// connection goes back to the pool instead of being closed. It reads for
// at most within: then it ends the attempt's context, which stops the read
// and closes the connection, as closing an unread body does.
func discard(resp *http.Response, within time.Duration) {
	if resp == nil {
		return
	}
	if body, ok := resp.Body.(*cancelOnClose); ok && within > 0 {
		stop := time.AfterFunc(within, body.cancel)
		_, _ = io.CopyN(io.Discard, body, maxDrain)
		stop.Stop()
	}
	_ = resp.Body.Close()
}

// cancelOnClose ends an attempt's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// withContextErr makes sure an error caused by the end of ctx matches ctx's
// error with errors.Is, whatever the base RoundTripper wrapped.
func withContextErr(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if cerr == nil || errors.Is(err, cerr) {
		return err
	}
	return fmt.Errorf("%w: %w", cerr, err)
}
