package gormstore

import (
	"os"
	"strings"
	"testing"

	"github.com/glebarez/sqlite"
	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// offlineDialects are GORM handles of each dialect that never connect: the
// schema SQL is rendered without a server.
func offlineDialects(t *testing.T) map[string]*gorm.DB {
	t.Helper()
	cfg := func() *gorm.Config { return &gorm.Config{DisableAutomaticPing: true, Logger: logger.Discard} }
	dialectors := map[string]gorm.Dialector{
		"sqlite":   sqlite.Open("file::memory:"),
		"postgres": postgres.New(postgres.Config{DSN: "host=127.0.0.1 port=1 user=none"}),
		"mysql":    mysql.New(mysql.Config{DSN: "none@tcp(127.0.0.1:1)/none", SkipInitializeWithVersion: true}),
	}
	dbs := map[string]*gorm.DB{}
	for name, d := range dialectors {
		db, err := gorm.Open(d, cfg())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		dbs[name] = db
	}
	return dbs
}

// readmeSQL is how the README shows a dialect's schema.
func readmeSQL(stmts []string) string {
	return "```sql\n" + strings.Join(stmts, ";\n\n") + ";\n```"
}

// TestREADMESchema: the CREATE statements in README.md are the ones
// AutoMigrate runs, for every dialect.
func TestREADMESchema(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, db := range offlineDialects(t) {
		s, err := New(db, WithPurgeInterval(0))
		if err != nil {
			t.Fatal(err)
		}
		if want := readmeSQL(s.SchemaSQL()); !strings.Contains(string(readme), want) {
			t.Errorf("README.md lacks the %s schema:\n%s", name, want)
		}
	}
}
