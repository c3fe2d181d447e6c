package idemclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// retryWait says whether an attempt's result deserves another attempt and
// how long to wait before it.
func (t *Transport) retryWait(kind requestKind, req *http.Request, key string, resp *http.Response, err error, attempt int) (time.Duration, bool) {
	if err != nil {
		if !retryableError(req, key, err) {
			return 0, false
		}
		return t.backoff(attempt), true
	}
	if !retryableStatus(resp.StatusCode, kind == keyed) {
		return 0, false
	}
	if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), t.cfg.Now()); ok {
		return d, true
	}
	return t.backoff(attempt), true
}

// retryableStatus reports whether a status says the same request may
// succeed later. 409 means "still running" only for keyed requests; for
// the others it is a conflict with the resource's state. A few 5xx say the
// server, or a proxy in front of it, cannot serve the request as sent: a
// method it does not implement (501), an HTTP version it does not speak
// (505), a broken content negotiation or a loop in its configuration (506,
// 508), an extension it requires (510), a login to the network (511).
// Every attempt would get the same answer.
func retryableStatus(code int, keyed bool) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	case http.StatusConflict:
		return keyed
	case http.StatusNotImplemented, http.StatusHTTPVersionNotSupported, http.StatusVariantAlsoNegotiates,
		http.StatusLoopDetected, http.StatusNotExtended, http.StatusNetworkAuthenticationRequired:
		return false
	}
	return code >= 500 && code <= 599
}

// refusals are the texts of net/http's errors for a request it will not
// send, whatever the attempt: they are plain errors, with no type to match.
var refusals = []string{
	"unsupported protocol scheme",
	"no Host in request URL",
	"nil Request.URL",
	"nil Request.Header",
	"invalid method",
}

// retryableError reports whether an attempt's error may go away on a new
// attempt. Network errors and timeouts may. A certificate the client
// rejects, a server that does not speak TLS, a URL or address that does
// not parse, a scheme the base RoundTripper does not support, or a header
// that cannot be sent will not: req is the request sent and key the key
// it carried, which are checked for the last case.
func retryableError(req *http.Request, key string, err error) bool {
	var (
		perm      permanentError
		cert      *tls.CertificateVerificationError
		rec       tls.RecordHeaderError
		authority x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		addr      *net.AddrError
		uerr      *url.Error
	)
	switch {
	case errors.As(err, &perm), errors.As(err, &cert), errors.As(err, &rec),
		errors.As(err, &authority), errors.As(err, &hostname), errors.As(err, &invalid):
		return false
	case errors.As(err, &addr): // "invalid port", "missing port in address": the URL's host is malformed
		return false
	case errors.As(err, &uerr) && uerr.Op == "parse": // a URL that does not parse, such as a proxy's
		return false
	case !sendableHeader(req.Header) || !validFieldValue(key):
		return false
	}
	msg := err.Error()
	for _, r := range refusals {
		if strings.Contains(msg, r) {
			return false
		}
	}
	return true
}

// sendableHeader reports whether every field of h may appear on the wire
// (RFC 9110, section 5): a token for a name, no control character but
// horizontal tab in a value.
func sendableHeader(h http.Header) bool {
	for name, values := range h {
		if !validToken(name) {
			return false
		}
		for _, v := range values {
			if !validFieldValue(v) {
				return false
			}
		}
	}
	return true
}

func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

func validFieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// backoff returns the wait after the attempt-th attempt, by Backoff.
func (t *Transport) backoff(attempt int) time.Duration {
	return Backoff(attempt, t.cfg.BaseBackoff, t.cfg.MaxBackoff, t.cfg.Random)
}

// Backoff returns the wait after the attempt-th failed attempt (1 for the
// first) by the rule of every idemkit client, this Transport and the gRPC
// interceptor alike: exponential backoff with full jitter, a uniformly
// random duration below min(limit, base·2^(attempt-1)), the ceiling scaled
// by random(), a number in [0, 1). A zero or negative base is
// DefaultBaseBackoff, a limit below base is base, and a nil random is
// math/rand/v2.Float64; a random outside [0, 1] is clamped to it, NaN
// taken as 0, so that a broken source never makes a negative wait.
func Backoff(attempt int, base, limit time.Duration, random func() float64) time.Duration {
	if base <= 0 {
		base = DefaultBaseBackoff
	}
	ceiling := max(limit, base)
	if shift := max(attempt-1, 0); shift < 63 {
		if d := base << shift; d>>shift == base && d < ceiling {
			ceiling = d
		}
	}
	if random == nil {
		random = rand.Float64
	}
	f := random()
	switch {
	case f < 0 || f != f:
		f = 0
	case f > 1:
		f = 1
	}
	return time.Duration(f * float64(ceiling))
}

// canWait reports whether a wait of d, started now, is worth starting: it
// must be no longer than MaxBackoff, end within the budget, and end before
// ctx's deadline, leaving the next attempt some time to run. A wait that is
// not started leaves the caller with the answer it has, not a context error.
func (t *Transport) canWait(ctx context.Context, start time.Time, d time.Duration) bool {
	// Backoff never exceeds MaxBackoff; a Retry-After may. Without this
	// bound, no budget and no deadline would let a server park the caller
	// for as long as it names.
	if d > t.cfg.MaxBackoff {
		return false
	}
	if t.cfg.Budget >= 0 && t.cfg.Now().Add(d).Sub(start) > t.cfg.Budget {
		return false
	}
	// The deadline is a time on the real clock, which the context's own
	// timer uses too: it is not measured with Config.Now.
	if dl, ok := ctx.Deadline(); ok && d >= time.Until(dl) {
		return false
	}
	return true
}

// parseRetryAfter reads a Retry-After value (RFC 9110, section 10.2.3):
// delay-seconds or an HTTP-date, taken relative to now. A date in the past
// means no wait. It reports false for an absent or malformed value.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		secs, err := strconv.ParseInt(v, 10, 64)
		if err != nil || secs > math.MaxInt64/int64(time.Second) {
			return time.Duration(math.MaxInt64), true // absurdly far: no budget covers it
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
