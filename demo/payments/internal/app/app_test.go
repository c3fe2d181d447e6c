package app

import "testing"

func TestMySQLDSN(t *testing.T) {
	for in, want := range map[string]string{
		"mysql://app:s3cret@127.0.0.1:3306/payments":    "app:s3cret@tcp(127.0.0.1:3306)/payments?parseTime=true",
		"mysql://app@db.local:3307/payments?timeout=5s": "app@tcp(db.local:3307)/payments?parseTime=true&timeout=5s",
		"mysql://127.0.0.1:3306/payments":               "tcp(127.0.0.1:3306)/payments?parseTime=true",
	} {
		got, err := mysqlDSN(in)
		if err != nil || got != want {
			t.Errorf("mysqlDSN(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestDBLabelHidesPassword(t *testing.T) {
	for db, want := range map[string]string{
		"payments.db": "sqlite:payments.db",
		"postgres://app:s3cret@127.0.0.1:5432/payments": "postgres://app@127.0.0.1:5432/payments",
	} {
		if got := (Config{DB: db}).DBLabel(); got != want {
			t.Errorf("DBLabel(%q) = %q, want %q", db, got, want)
		}
	}
}

func TestEnvName(t *testing.T) {
	if got := EnvName("provider-failure-rate"); got != "PAYMENTS_PROVIDER_FAILURE_RATE" {
		t.Fatalf("EnvName = %q", got)
	}
}
