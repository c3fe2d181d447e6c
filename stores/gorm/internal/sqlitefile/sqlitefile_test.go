package sqlitefile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneName: a file with one name passes, and so does one that does not
// exist yet; a file with two is refused, by either name, with an error
// naming the file; once a name is gone, it passes again.
func TestOneName(t *testing.T) {
	dir := t.TempDir()
	path, other := filepath.Join(dir, "a.db"), filepath.Join(dir, "b.db")
	if err := OneName(path); err != nil {
		t.Fatalf("a file not created yet: %v", err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := OneName(path); err != nil {
		t.Fatalf("a file of one name: %v", err)
	}
	if err := os.Link(path, other); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, other} {
		if err := OneName(p); err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "2 names") {
			t.Fatalf("%s, one of 2 names of a file: %v; want an error naming it", p, err)
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := OneName(other); err != nil {
		t.Fatalf("the file once its other name is gone: %v", err)
	}
}
