package gormstore

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// oldSchema is the table of the versions that keyed records by the scope
// and key themselves, as they created it.
var oldSchema = map[string]string{
	"postgres": `CREATE TABLE "idem_records" ("idem_scope" text NOT NULL, "idem_key" text NOT NULL,
  "fingerprint" bytea NOT NULL, "idem_state" smallint NOT NULL, "owner_token" text NOT NULL,
  "lease_until" bigint NOT NULL, "created_at" bigint NOT NULL, "completed_at" bigint,
  "expires_at" bigint NOT NULL, "resp_status" integer NOT NULL, "resp_headers" bytea, "resp_body" bytea,
  PRIMARY KEY ("idem_scope", "idem_key"));
CREATE INDEX "idem_records_expires_at_idx" ON "idem_records" ("expires_at")`,
	"mysql": "CREATE TABLE `idem_records` (`idem_scope` varbinary(255) NOT NULL, `idem_key` varbinary(255) NOT NULL, " +
		"`fingerprint` binary(32) NOT NULL, `idem_state` tinyint NOT NULL, `owner_token` varbinary(255) NOT NULL, " +
		"`lease_until` bigint NOT NULL, `created_at` bigint NOT NULL, `completed_at` bigint NULL, " +
		"`expires_at` bigint NOT NULL, `resp_status` smallint NOT NULL, `resp_headers` mediumblob NULL, " +
		"`resp_body` longblob NULL, PRIMARY KEY (`idem_scope`, `idem_key`), KEY `idem_records_expires_at_idx` (`expires_at`)) ENGINE=InnoDB",
}

// upgradeStatements returns the README's statements that carry the records
// of an old table over, for the dialect whose section starts with title.
func upgradeStatements(t *testing.T, title string) []string {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, upgrading, _ := strings.Cut(string(readme), "\n### Upgrading")
	_, rest, ok := strings.Cut(upgrading, "\n"+title+"\n\n```sql\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatalf("README.md has no SQL block after %q", title)
	}
	return strings.Split(strings.TrimSuffix(strings.TrimSpace(block), ";"), ";\n")
}

// TestUpgradeStatements: on a table of the old schema, AutoMigrate fails
// and says why; the README's statements carry its records over to the new
// table, where the store finds them by their scope and key.
func TestUpgradeStatements(t *testing.T) {
	for _, c := range []struct{ backend, title string }{
		{"postgres", "PostgreSQL (11 or later):"},
		{"mysql", "MySQL / MariaDB:"},
	} {
		t.Run(c.backend, func(t *testing.T) {
			t.Parallel()
			db := backendNamed(c.backend).open(t)
			table := uniqueTable("upgrade")
			rename := func(sql string) string { return strings.ReplaceAll(sql, "idem_records", table) }
			for _, stmt := range strings.Split(oldSchema[c.backend], ";\n") {
				if err := db.Exec(rename(stmt)).Error; err != nil {
					t.Fatal(err)
				}
			}
			s, err := New(db, WithTable(table), WithPurgeInterval(0))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				dropTable(t, db, table)
				dropTable(t, db, table+"_old")
			})
			ctx := testCtx(t)
			completed := idem.ID{Scope: "acct_1", Key: "k-done"}
			inFlight := idem.ID{Scope: "acct_1", Key: "k-running"}
			ins := rename("INSERT INTO idem_records (idem_scope, idem_key, fingerprint, idem_state, owner_token, lease_until, created_at, " +
				"completed_at, expires_at, resp_status, resp_headers, resp_body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?)")
			far := t0.Add(time.Hour)
			if err := db.Exec(ins, completed.Scope, completed.Key, fpA[:], 2, "tok-1", nanos(t0), nanos(t0), nanos(t0), nanos(far), 201, []byte("done")).Error; err != nil {
				t.Fatal(err)
			}
			if err := db.Exec(ins, inFlight.Scope, inFlight.Key, fpA[:], 1, "tok-2", nanos(far), nanos(t0), nil, nanos(far), 0, nil).Error; err != nil {
				t.Fatal(err)
			}

			if err := s.AutoMigrate(ctx); err == nil || !strings.Contains(err.Error(), "earlier version") {
				t.Fatalf("AutoMigrate on the old table: %v, want an error saying it is of an earlier version", err)
			}
			for _, stmt := range upgradeStatements(t, c.title) {
				stmt = strings.TrimSpace(stmt)
				if strings.HasPrefix(stmt, "-- create the new table") {
					if err := s.AutoMigrate(ctx); err != nil {
						t.Fatal(err)
					}
					_, stmt, _ = strings.Cut(stmt, "\n")
				}
				if err := db.Exec(rename(stmt)).Error; err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}

			rec, err := s.Get(ctx, completed)
			if err != nil || rec.State != idem.Completed || !bytes.Equal(rec.Response.Body, []byte("done")) || rec.Response.Status != 201 {
				t.Fatalf("completed record after the upgrade: %+v, %v", rec, err)
			}
			if rec, o, err := s.Acquire(ctx, acquireAt(inFlight, "tok-3", t0)); err != nil || o != idem.AcquireExisting || rec.Token != "tok-2" {
				t.Fatalf("Acquire of the in-flight key after the upgrade: %v (%q), %v; want Existing, held by tok-2", o, rec.Token, err)
			}
			if err := s.Complete(ctx, inFlight, "tok-2", idem.Completion{Response: exchange.Response{Status: 200}, CompletedAt: t0, ExpiresAt: far}); err != nil {
				t.Fatalf("the holder's Complete after the upgrade: %v", err)
			}
			var n int
			if err := db.Raw("SELECT COUNT(*) FROM " + s.sql.quotedTableName).Scan(&n).Error; err != nil || n != 2 {
				t.Fatalf("%d records in the new table (%v), want 2", n, err)
			}
			if c.backend == "postgres" {
				// PostgreSQL names indexes per schema: the old one had to make
				// way for the new table's.
				if err := db.Raw("SELECT COUNT(*) FROM pg_indexes WHERE tablename = ?", table).Scan(&n).Error; err != nil || n != 2 {
					t.Fatalf("the new table has %d indexes (%v), want its primary key and its expiry index", n, err)
				}
			}
		})
	}
}
