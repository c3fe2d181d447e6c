// Package redact keeps the passwords of connection strings out of what
// the repository's programs print: the demo's log lines and idemctl's
// errors. A connection string comes in many forms (a URL with a password
// in its userinfo or its query, PostgreSQL's key=value form, the Go MySQL
// driver's user:pass@tcp(host)/db, or any of these malformed), and a
// driver's error may quote it whole or in part: so a program both shows
// each string by DSN, and passes every text it prints through Scrub with
// the Secrets of every string it was given.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Mask stands for a secret in a text.
const Mask = "xxxxx"

// secretParam matches the names of the query parameters and key=value
// settings that hold secrets: password, sslpassword, pass, pwd, secret,
// token, apikey...
var secretParam = regexp.MustCompile(`(?i)pass|pwd|secret|token|key`)

// keyValue matches one setting of PostgreSQL's key=value form: a name,
// "=", and a value, quoted with single quotes (and backslash escapes) or
// not.
var keyValue = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)`)

// queryParam matches a query parameter of a URL, as text.
var queryParam = regexp.MustCompile(`[?&]([^=&#]+)=([^&#]*)`)

// goMySQL matches the Go MySQL driver's DSN: [user[:password]@][net[(addr)]]/dbname[?params].
var goMySQL = regexp.MustCompile(`^([^:@/]*)(?::(.*))?@([a-z0-9]*(?:\([^)]*\))?)/`)

// Secrets returns the secrets dsn holds, in every form a text may quote
// them (as written, and percent-decoded): the password of a URL's
// userinfo, the values of its query parameters named for a secret, the
// password= of PostgreSQL's key=value form, the password of the Go MySQL
// driver's form; and, for a URL that does not parse, whatever lies
// between the first ':' of its userinfo and its last '@'.
func Secrets(dsn string) []string {
	var out []string
	add := func(s string) {
		if s == "" {
			return
		}
		out = append(out, s)
		if d, err := url.PathUnescape(s); err == nil && d != s {
			out = append(out, d)
		}
		if d, err := url.QueryUnescape(s); err == nil && d != s {
			out = append(out, d)
		}
	}
	if scheme, rest, ok := strings.Cut(dsn, "://"); ok && scheme != "" {
		if u, err := url.Parse(dsn); err == nil {
			if p, ok := u.User.Password(); ok {
				add(p)
			}
			for name, values := range u.Query() {
				if secretParam.MatchString(name) {
					for _, v := range values {
						add(v)
					}
				}
			}
		}
		// Also as text, for a URL that does not parse (url.Parse quotes
		// it whole in its error) and for the raw, encoded forms.
		authority := rest
		if i := strings.IndexAny(authority, "/?#"); i >= 0 && strings.LastIndex(authority, "@") < i {
			authority = authority[:i]
		}
		if at := strings.LastIndex(authority, "@"); at >= 0 {
			if _, p, ok := strings.Cut(authority[:at], ":"); ok {
				add(p)
			}
		}
		for _, m := range queryParam.FindAllStringSubmatch(rest, -1) {
			if secretParam.MatchString(m[1]) {
				add(m[2])
			}
		}
		return out
	}
	if m := goMySQL.FindStringSubmatch(dsn); m != nil {
		add(m[2])
		if _, q, ok := strings.Cut(dsn, "?"); ok {
			for _, kv := range strings.Split(q, "&") {
				if k, v, ok := strings.Cut(kv, "="); ok && secretParam.MatchString(k) {
					add(v)
				}
			}
		}
		return out
	}
	for _, m := range keyValue.FindAllStringSubmatch(dsn, -1) {
		if secretParam.MatchString(m[1]) {
			v := m[2]
			add(v)
			if len(v) >= 2 && v[0] == '\'' {
				add(strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(v[1 : len(v)-1]))
			}
		}
	}
	return out
}

// Scrub returns text with every one of secrets replaced by Mask, longest
// first (a secret may hold another).
func Scrub(text string, secrets ...string) string {
	sorted := make([]string, 0, len(secrets))
	for _, s := range secrets {
		if s != "" {
			sorted = append(sorted, s)
		}
	}
	for i := 1; i < len(sorted); i++ {
		for j := i; j > 0 && len(sorted[j]) > len(sorted[j-1]); j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	for _, s := range sorted {
		text = strings.ReplaceAll(text, s, Mask)
	}
	return text
}

// DSN names a connection string for logs and errors, without its
// secrets: a URL without the password of its userinfo and with the
// secret query parameters masked, PostgreSQL's key=value form and the Go
// MySQL driver's form with their passwords masked. A URL that does not
// parse is named by its scheme alone. Text that is none of these (a file
// path) comes back as it is.
func DSN(dsn string) string {
	if scheme, _, ok := strings.Cut(dsn, "://"); ok && scheme != "" {
		u, err := url.Parse(dsn)
		if err != nil {
			return "(a " + schemeOf(scheme) + ":// URL that does not parse)"
		}
		if u.User != nil {
			u.User = url.User(u.User.Username())
		}
		if u.RawQuery != "" {
			q := u.Query()
			for name := range q {
				if secretParam.MatchString(name) {
					q[name] = []string{Mask}
				}
			}
			u.RawQuery = q.Encode()
		}
		return strings.Replace(u.String(), url.QueryEscape(Mask), Mask, -1)
	}
	return Scrub(dsn, Secrets(dsn)...)
}

// schemeOf is a URL's scheme as it may be shown: letters, digits, + - .
// only.
func schemeOf(s string) string {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.') {
			return "database"
		}
	}
	return s
}
