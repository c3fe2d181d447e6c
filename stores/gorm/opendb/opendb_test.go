package opendb

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idemkit/core/idemtest"
)

func TestMySQLDSN(t *testing.T) {
	for in, want := range map[string]string{
		"mysql://app:s3cret@127.0.0.1:3306/payments":    "app:s3cret@tcp(127.0.0.1:3306)/payments?parseTime=true",
		"mysql://app@db.local:3307/payments?timeout=5s": "app@tcp(db.local:3307)/payments?parseTime=true&timeout=5s",
		"mysql://127.0.0.1:3306/payments":               "tcp(127.0.0.1:3306)/payments?parseTime=true",
	} {
		got, err := MySQLDSN(in)
		if err != nil || got != want {
			t.Errorf("MySQLDSN(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestLabelHidesPassword(t *testing.T) {
	for dsn, want := range map[string]string{
		"payments.db": "sqlite:payments.db",
		"postgres://app:s3cret@127.0.0.1:5432/payments":             "postgres://app@127.0.0.1:5432/payments",
		"postgres://app@127.0.0.1:5432/payments?password=s3cret":    "postgres://app@127.0.0.1:5432/payments?password=xxxxx",
		"mysql://app:s3cret@127.0.0.1:3306/payments":                "mysql://app@127.0.0.1:3306/payments",
		"postgres://app:s3cret@[::1/payments":                       "(a postgres:// URL that does not parse)",
		"host=db.internal user=app password=s3cret dbname=payments": "host=db.internal user=app password=xxxxx dbname=payments",
		"app:s3cret@tcp(db.internal:3306)/payments":                 "app:xxxxx@tcp(db.internal:3306)/payments",
		"oracle://scott:s3cret@db/x":                                "oracle://scott@db/x",
	} {
		if got := Label(dsn); got != want {
			t.Errorf("Label(%q) = %q, want %q", dsn, got, want)
		}
	}
}

// Defect: a malformed mysql:// URL's error quoted it whole, password
// included.
func TestMySQLDSNErrorShowsNoPassword(t *testing.T) {
	for _, dsn := range []string{"mysql://app:s3cret@[::1/payments", "mysql://app:s3cret@db:port/x", "app:s3cret@tcp(db:1)/x?parseTime=maybe"} {
		if _, err := MySQLDSN(dsn); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("MySQLDSN(%q): %v; want an error without the password", dsn, err)
		}
	}
	if got, err := MySQLDSN("app:s3cret@tcp(db.internal:3306)/payments?timeout=2s"); err != nil ||
		!strings.Contains(got, "parseTime=true") || !strings.HasPrefix(got, "app:s3cret@tcp(db.internal:3306)/payments?") {
		t.Errorf("MySQLDSN of the driver's form = %q, %v; want it with parseTime", got, err)
	}
}

func TestKindOf(t *testing.T) {
	for dsn, want := range map[string]Kind{"a.db": SQLite, "postgres://h/d": PostgreSQL, "postgresql://h/d": PostgreSQL, "mysql://h/d": MySQL,
		"host=db user=app dbname=p sslmode=disable": PostgreSQL, "dbname=payments": PostgreSQL, "app:pw@tcp(db:3306)/p": MySQL,
		"app@unix(/run/mysqld/mysqld.sock)/p": MySQL, "data/x=1.db": SQLite, "./a@b.db": SQLite} {
		if got, err := KindOf(dsn); got != want || err != nil {
			t.Errorf("KindOf(%q) = %v, %v; want %v", dsn, got, err, want)
		}
	}
	_, err := KindOf("oracle://scott:tiger@h/d")
	if err == nil || !strings.Contains(err.Error(), "unsupported database") || strings.Contains(err.Error(), "tiger") {
		t.Errorf("KindOf(oracle://) = %v; want an error naming no password", err)
	}
}

func TestOpenReadOnlyRefusesAMissingFile(t *testing.T) {
	path := t.TempDir() + "/missing.db"
	if _, err := OpenReadOnly(context.Background(), path); err == nil || !strings.Contains(err.Error(), "missing.db") {
		t.Fatalf("OpenReadOnly of a missing file: %v; want an error naming it", err)
	}
}

// Defect: opening a database server that accepted and never answered
// took no deadline: idemctl's -timeout 2s ran over 130 s. OpenContext
// ends with its context.
func TestOpenContextEndsWithItsContext(t *testing.T) {
	addr := idemtest.SilentServer(t)
	for _, dsn := range []string{"postgres://app:s3cret@" + addr + "/payments?sslmode=disable", "mysql://app:s3cret@" + addr + "/payments"} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		done := make(chan error, 1)
		go func() {
			_, err := OpenContext(ctx, dsn)
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
				t.Errorf("OpenContext(%s) on a server that never answers: %v; want the context's deadline", Label(dsn), err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("OpenContext(%s) still waits 30 s after its context's deadline of 300 ms", Label(dsn))
		}
		cancel()
	}
}
