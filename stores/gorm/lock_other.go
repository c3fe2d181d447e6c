//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd || windows)

package gormstore

import "io"

// lockFile takes no lock where Go's standard library offers none (Solaris,
// illumos, AIX, Plan 9, WebAssembly): there the one-process rule of a
// SQLite store is not enforced, and the user keeps to it.
func lockFile(string) (io.Closer, error) { return io.NopCloser(nil), nil }
