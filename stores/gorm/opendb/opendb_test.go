package opendb

import (
	"strings"
	"testing"
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
		"postgres://app:s3cret@127.0.0.1:5432/payments": "postgres://app@127.0.0.1:5432/payments",
		"mysql://app:s3cret@127.0.0.1:3306/payments":    "mysql://app@127.0.0.1:3306/payments",
		"postgres://app:s3cret@[::1/payments":           "(a DSN that does not parse as a URL)",
	} {
		if got := Label(dsn); got != want {
			t.Errorf("Label(%q) = %q, want %q", dsn, got, want)
		}
	}
}

func TestKindOf(t *testing.T) {
	for dsn, want := range map[string]Kind{"a.db": SQLite, "postgres://h/d": PostgreSQL, "postgresql://h/d": PostgreSQL, "mysql://h/d": MySQL} {
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
	if _, err := OpenReadOnly(path); err == nil || !strings.Contains(err.Error(), "missing.db") {
		t.Fatalf("OpenReadOnly of a missing file: %v; want an error naming it", err)
	}
}
