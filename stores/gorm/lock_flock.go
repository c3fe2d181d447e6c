//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package gormstore

import (
	"errors"
	"io"
	"os"
	"strconv"
	"syscall"
)

// lockFile creates path if need be and takes an exclusive flock(2) on it,
// without waiting: errLocked if another process holds it. The kernel lets
// it go when the returned file is closed, or when the process dies, so a
// crash leaves no lock behind. The holder's process ID is written in the
// file for whoever looks.
func lockFile(path string) (io.Closer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errLocked
		}
		return nil, err
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
