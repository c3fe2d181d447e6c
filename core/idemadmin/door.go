package idemadmin

import (
	"crypto/sha256"
	"crypto/subtle"
	"mime"
	"net"
	"net/http"
	"strings"
)

// The handler's door: who may use it, and how a request must look. It can
// make a completed request run again (forget) and delete records in bulk
// (purge), so it serves programs an operator runs (idemctl, curl), never a
// browser, and no one beyond the machine unless the operator gave it a
// credential:
//
//   - a request a browser made on a page's behalf (one with an Origin
//     field, or a Sec-Fetch-Site other than "none") is refused, whatever
//     its origin: no page, on any site, may drive the handler;
//   - without HandlerOptions.Token, only a loopback peer (127.0.0.0/8,
//     ::1) that names a loopback host in its Host field (localhost, or a
//     loopback address) is served: a page whose DNS name was rebound to
//     127.0.0.1 names its own host, and is refused;
//   - with a Token, a request from any peer is served if it carries
//     "Authorization: Bearer <Token>", compared in constant time;
//   - a POST's body is application/json and exactly one JSON object: a
//     form's text/plain, urlencoded or multipart body, an empty body, and
//     anything after the object are refused.

// refusal is why the door refuses a request, as a problem; nil lets it in.
type refusal struct {
	status      int
	name, title string
	detail      string
}

// admit checks r against the door's rules. token is the credential, or
// "" for loopback only.
func admit(r *http.Request, token string) *refusal {
	if r.Header.Get("Origin") != "" || fetchedByPage(r.Header.Get("Sec-Fetch-Site")) {
		return &refusal{http.StatusForbidden, "forbidden", "Forbidden",
			"the admin endpoint serves no browser: a request made for a web page (Origin or Sec-Fetch-Site) is refused"}
	}
	if token != "" {
		if !bearerIs(r.Header.Get("Authorization"), token) {
			return &refusal{http.StatusUnauthorized, "unauthorized", "Unauthorized",
				"this admin endpoint needs its token, as Authorization: Bearer <token>"}
		}
		return nil
	}
	if !loopbackPeer(r.RemoteAddr) || !loopbackHost(r.Host) {
		return &refusal{http.StatusForbidden, "forbidden", "Forbidden",
			"without a token the admin endpoint serves loopback only: a loopback peer, addressed as localhost or a loopback address"}
	}
	return nil
}

// fetchedByPage reports whether a Sec-Fetch-Site value says a page made
// the request: "none" is the user's own navigation (an address typed in),
// which carries no page's intent.
func fetchedByPage(site string) bool {
	return site != "" && site != "none"
}

// bearerIs reports whether an Authorization field carries token as a
// bearer credential. The comparison takes the same time whatever the
// field holds: both sides are hashed to one length first.
func bearerIs(field, token string) bool {
	scheme, cred, ok := strings.Cut(field, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		cred = ""
	}
	got, want := sha256.Sum256([]byte(strings.TrimSpace(cred))), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1 && ok
}

// loopbackPeer reports whether a request's RemoteAddr is a loopback
// address.
func loopbackPeer(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackHost reports whether a Host field names this machine by a name
// no one else can answer for: localhost, or a loopback address.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// jsonBody reports whether a Content-Type field says application/json
// (with at most a UTF-8 charset).
func jsonBody(contentType string) bool {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "application/json" {
		return false
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return false
		}
	}
	return true
}

// Loopback reports whether addr, a listener's address such as
// "127.0.0.1:9091", "[::1]:9091" or "localhost:9091", can be reached from
// this machine alone. An address that cannot be parsed, an empty host and
// 0.0.0.0 are not: a program serving the handler beyond loopback should
// log so, and give it a Token.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return loopbackHost(host)
}
