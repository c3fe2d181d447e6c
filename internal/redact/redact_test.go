package redact

import (
	"net/url"
	"strings"
	"testing"
)

// The password is s3cretpw, or a form of it, in every connection string;
// DSN must show none, and Scrub with Secrets must take it out of any text
// quoting the string, even a parser's error.
var cases = []struct {
	dsn, label string
}{
	{"postgres://app:s3cretpw@db.internal:5432/payments", "postgres://app@db.internal:5432/payments"},
	{"postgres://app@db.internal/payments?sslmode=require&password=s3cretpw", "postgres://app@db.internal/payments?password=xxxxx&sslmode=require"},
	{"postgresql://app:s3cret%40pw@db/p", "postgresql://app@db/p"},
	{"mysql://app:s3cretpw@127.0.0.1:3306/payments", "mysql://app@127.0.0.1:3306/payments"},
	{"redis://:s3cretpw@127.0.0.1:6379/0", "redis://@127.0.0.1:6379/0"},
	{"rediss://default:s3cretpw@cache:6380", "rediss://default@cache:6380"},
	{"host=db.internal user=app password=s3cretpw dbname=payments sslmode=disable", "host=db.internal user=app password=xxxxx dbname=payments sslmode=disable"},
	{"host=db user=app password='s3cret pw' dbname=p", "host=db user=app password=xxxxx dbname=p"},
	{"app:s3cretpw@tcp(db.internal:3306)/payments?parseTime=true", "app:xxxxx@tcp(db.internal:3306)/payments?parseTime=true"},
	{"app:s3cretpw@unix(/run/mysqld.sock)/payments", "app:xxxxx@unix(/run/mysqld.sock)/payments"},
	{"mysql://app:s3cretpw@[::1/payments", "(a mysql:// URL that does not parse)"},
	{"redis://:s3cretpw@127.0.0.1:notaport/0", "(a redis:// URL that does not parse)"},
	{"postgres://app:s3cretpw@db/p?sslmode=%zz", "postgres://app@db/p"},
	{"payments.db", "payments.db"},
}

func TestDSNShowsNoPassword(t *testing.T) {
	for _, tc := range cases {
		if got := DSN(tc.dsn); got != tc.label {
			t.Errorf("DSN(%q) = %q, want %q", tc.dsn, got, tc.label)
		}
	}
}

func TestScrubTakesThePasswordOutOfAnyText(t *testing.T) {
	for _, tc := range cases {
		texts := []string{"open " + tc.dsn + ": connection refused"}
		if _, err := url.Parse(tc.dsn); err != nil {
			texts = append(texts, err.Error()) // the URL, quoted whole
		}
		if u, err := url.Parse(tc.dsn); err == nil && u.User != nil {
			p, _ := u.User.Password()
			texts = append(texts, "auth failed with password "+p)
		}
		for _, text := range texts {
			got := Scrub(text, Secrets(tc.dsn)...)
			for _, pw := range []string{"s3cretpw", "s3cret%40pw", "s3cret@pw", "s3cret pw"} {
				if strings.Contains(got, pw) {
					t.Errorf("Scrub of %q with the secrets of %q left %q: %q", text, tc.dsn, pw, got)
				}
			}
		}
	}
	if got := Scrub("a b ab", "a", "ab"); got != "xxxxx b xxxxx" {
		t.Errorf("Scrub replaced a shorter secret first: %q", got)
	}
}
