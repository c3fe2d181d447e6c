package idemclient

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// hopKey returns the key to send on req, a request an http.Client made to
// follow a 307 or 308 redirect (req.Response is set), which carries key.
//
// http.Client copies the original request's headers onto the hop, so a
// caller's key arrives here unchanged, for another target. Sent as it is, an
// idemkit server would find it used on another path and answer 422, or, on
// the same path, replay the recorded redirect. The hop gets a key derived
// from the caller's and its own method and URL instead: each target has a
// key of its own, and a caller retrying the whole call with its key gets
// the same hop key, so the redirected operation runs once too.
//
// A key that differs from the original request's was set for this hop, by
// a CheckRedirect function for instance, and is kept.
func (t *Transport) hopKey(req *http.Request, key string) string {
	orig := req
	for orig.Response != nil && orig.Response.Request != nil {
		orig = orig.Response.Request
	}
	if orig != req {
		if origKey, found, _ := t.callerKey(orig.Header); !found || origKey != key {
			return key
		}
	}
	// Without the original request (a wrapper dropped Response.Request),
	// the key cannot be told apart from a copied one: derive it.
	return derivedKey(key, req)
}

// derivedKey returns an sf-string key, a SHA-256 of the key, the method and
// the target. A NUL cannot occur in a header value, so it separates the
// parts unambiguously.
func derivedKey(key string, req *http.Request) string {
	h := sha256.New()
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(req.Method))
	h.Write([]byte{0})
	if u := req.URL; u != nil {
		h.Write([]byte(strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host) + u.RequestURI()))
	}
	var b [2 + 2*sha256.Size]byte
	b[0], b[len(b)-1] = '"', '"'
	hex.Encode(b[1:len(b)-1], h.Sum(nil))
	return string(b[:])
}
