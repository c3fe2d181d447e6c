// Package nodetest runs the demo's tests' Node.js programs (clients no
// one here wrote, from npm): it finds node and npm, and installs a
// program's packages as its lockfile pins them, once per lockfile, in the
// user's cache.
package nodetest

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Tool returns the path of node or npm, and fails tb, saying how to
// install it, when it is missing.
func Tool(tb testing.TB, name string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		tb.Fatalf("%s is not installed (apt-get install nodejs npm; scripts/test-all does, as root): "+
			"the demo is tested with Node.js clients from npm (or run with -short)", name)
	}
	return path
}

// Modules installs the packages of the Node.js program in dir (its
// package.json and package-lock.json) as the lockfile pins them (npm ci)
// into a folder of the user's cache, ~/.cache/idemkit/NAME/HASH, named
// after the two files' hash, the first time, and returns its node_modules
// folder, for NODE_PATH. Nothing is written in the working tree. The
// install is made in a folder of its own, renamed into place when
// complete, so that a test that runs meanwhile never finds it half done.
func Modules(tb testing.TB, dir, name string) string {
	tb.Helper()
	npm := Tool(tb, "npm")
	var files [][]byte
	h := sha256.New()
	for _, file := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			tb.Fatal(err)
		}
		files = append(files, b)
		h.Write(b)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	base = filepath.Join(base, "idemkit", name)
	into := filepath.Join(base, hex.EncodeToString(h.Sum(nil))[:16])
	done := func(dir string) bool {
		_, err := os.Stat(filepath.Join(dir, "installed"))
		return err == nil
	}
	if done(into) {
		return filepath.Join(into, "node_modules")
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		tb.Fatal(err)
	}
	tmp, err := os.MkdirTemp(base, "install-")
	if err != nil {
		tb.Fatal(err)
	}
	defer os.RemoveAll(tmp) // gone once renamed
	for i, file := range []string{"package.json", "package-lock.json"} {
		if err := os.WriteFile(filepath.Join(tmp, file), files[i], 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("npm ci (the packages of %s): %v\n%s", dir, err, out)
	}
	if err := os.WriteFile(filepath.Join(tmp, "installed"), nil, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, into); err != nil && !done(into) {
		tb.Fatalf("%v (remove %s and run again)", err, into)
	}
	return filepath.Join(into, "node_modules")
}
