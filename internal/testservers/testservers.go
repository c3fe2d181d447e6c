// Package testservers gives the tests of every module of the repository
// the addresses of the throwaway database servers that scripts/test-all
// (make test) starts, or that scripts/servers.sh and
// scripts/redis-servers.sh start in a shell (see CONTRIBUTING.md). A test
// that needs a server fails without it, saying how to start it, except
// under -short, which runs without servers.
package testservers

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The variables the server scripts export.
const (
	PostgresDSN       = "IDEMKIT_TEST_POSTGRES_DSN"        // postgres://...
	MySQLDSN          = "IDEMKIT_TEST_MYSQL_DSN"           // user:pass@tcp(host:port)/db, the Go driver's form
	RedisAddr         = "IDEMKIT_TEST_REDIS_ADDR"          // host:port of one node
	RedisClusterAddrs = "IDEMKIT_TEST_REDIS_CLUSTER_ADDRS" // host:port,... of a Cluster's masters
)

// Require returns the value of env. Without it, tb is skipped under
// -short, and fails otherwise.
func Require(tb testing.TB, env string) string {
	tb.Helper()
	return lookup(tb, env, testing.Short(), true)
}

// Optional returns the value of env. Without it, it returns "" under
// -short, for a test that then runs without the server (on SQLite, say),
// and fails tb otherwise.
func Optional(tb testing.TB, env string) string {
	tb.Helper()
	return lookup(tb, env, testing.Short(), false)
}

func lookup(tb testing.TB, env string, short, skip bool) string {
	tb.Helper()
	v := os.Getenv(env)
	switch {
	case v != "":
		return v
	case short && skip:
		tb.Skipf("%s is not set; -short skips the tests that need a server", env)
	case !short:
		tb.Fatalf("%s is not set: run the tests with `make test` (scripts/test-all), which starts the servers, or %s first", env, startCommand(env))
	}
	return ""
}

// startCommand is the shell command that starts the server of env.
func startCommand(env string) string {
	if strings.HasPrefix(env, "IDEMKIT_TEST_REDIS_") {
		return "`source scripts/redis-servers.sh && start_redis_servers`"
	}
	return "`source scripts/servers.sh && start_servers`"
}

var goMySQLDSN = regexp.MustCompile(`^([^@]*)@tcp\(([^)]*)\)/([^?]*)`)

// MySQLURL turns dsn, a MySQLDSN value in the Go driver's form, into the
// mysql://user:pass@host:port/db URL a user gives the demo's -db or
// idemctl's -store; it fails tb for a DSN of another form.
func MySQLURL(tb testing.TB, dsn string) string {
	tb.Helper()
	m := goMySQLDSN.FindStringSubmatch(dsn)
	if m == nil {
		tb.Fatalf("%s %q is not user:pass@tcp(host:port)/db", MySQLDSN, dsn)
		return ""
	}
	return "mysql://" + m[1] + "@" + m[2] + "/" + m[3]
}
