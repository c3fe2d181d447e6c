package idemclient

import (
	"context"
	"crypto/tls"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// retryWait says whether an attempt's result deserves another attempt and
// how long to wait before it.
func (t *Transport) retryWait(kind requestKind, resp *http.Response, err error, attempt int) (time.Duration, bool) {
	if err != nil {
		if !retryableError(err) {
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
// the others it is a conflict with the resource's state.
func retryableStatus(code int, keyed bool) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return true
	case http.StatusConflict:
		return keyed
	}
	return code >= 500 && code <= 599
}

// retryableError reports whether an attempt's error may go away on a new
// attempt. Network errors and timeouts may; a certificate the client
// rejects, or a server that does not speak TLS, will not.
func retryableError(err error) bool {
	var (
		perm permanentError
		cert *tls.CertificateVerificationError
		rec  tls.RecordHeaderError
	)
	return !errors.As(err, &perm) && !errors.As(err, &cert) && !errors.As(err, &rec)
}

// backoff returns the wait after the attempt-th attempt: full jitter, a
// uniformly random duration below min(MaxBackoff, BaseBackoff·2^(attempt-1)).
func (t *Transport) backoff(attempt int) time.Duration {
	ceiling := t.cfg.MaxBackoff
	if shift := attempt - 1; shift < 63 {
		if d := t.cfg.BaseBackoff << shift; d>>shift == t.cfg.BaseBackoff && d < ceiling {
			ceiling = d
		}
	}
	f := t.cfg.Random()
	switch {
	case f < 0 || f != f: // a broken source must not make a negative wait
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
