package testservers

import (
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB that notes how a test would end.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Skipf(f string, args ...any)  { r.skipped = fmt.Sprintf(f, args...) }
func (r *recorder) Fatalf(f string, args ...any) { r.failed = fmt.Sprintf(f, args...) }

func TestLookup(t *testing.T) {
	t.Setenv(PostgresDSN, "postgres://x")
	t.Setenv(RedisAddr, "")
	for _, tc := range []struct {
		name                  string
		env                   string
		short, skip           bool
		want, skipped, failed string
	}{
		{name: "set", env: PostgresDSN, skip: true, want: "postgres://x"},
		{name: "set under -short", env: PostgresDSN, short: true, want: "postgres://x"},
		{name: "required, unset, -short", env: RedisAddr, short: true, skip: true, skipped: RedisAddr + " is not set"},
		{name: "optional, unset, -short", env: RedisAddr, short: true},
		{name: "required, unset", env: RedisAddr, skip: true, failed: "start_redis_servers"},
		{name: "optional, unset", env: MySQLDSN, failed: "source scripts/servers.sh && start_servers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env == MySQLDSN {
				t.Setenv(MySQLDSN, "")
			}
			r := &recorder{TB: t}
			got := lookup(r, tc.env, tc.short, tc.skip)
			if got != tc.want {
				t.Errorf("lookup = %q, want %q", got, tc.want)
			}
			if (tc.skipped == "") != (r.skipped == "") || !strings.Contains(r.skipped, tc.skipped) {
				t.Errorf("skipped %q, want a skip saying %q", r.skipped, tc.skipped)
			}
			if (tc.failed == "") != (r.failed == "") || !strings.Contains(r.failed, tc.failed) || (r.failed != "" && !strings.Contains(r.failed, tc.env)) {
				t.Errorf("failed %q, want a failure naming %s and saying %q", r.failed, tc.env, tc.failed)
			}
		})
	}
}

func TestMySQLURL(t *testing.T) {
	if got, want := MySQLURL(t, "idemkit:pw@tcp(127.0.0.1:3306)/idemkit_test?parseTime=true"), "mysql://idemkit:pw@127.0.0.1:3306/idemkit_test"; got != want {
		t.Errorf("MySQLURL = %q, want %q", got, want)
	}
	r := &recorder{TB: t}
	if MySQLURL(r, "mysql://already/a/url"); !strings.Contains(r.failed, "is not user:pass@tcp(host:port)/db") {
		t.Errorf("a DSN of another form: failed %q", r.failed)
	}
}
