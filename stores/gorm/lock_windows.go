//go:build windows

package gormstore

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// lockFile opens path, creating it if need be, shared with no other
// opener: a second process's open fails with a sharing violation
// (errLocked) until the returned file is closed or this process dies.
func lockFile(path string) (io.Closer, error) {
	name, err := syscall.UTF16PtrFromString(path)
	if err != nil {
		return nil, err
	}
	h, err := syscall.CreateFile(name, syscall.GENERIC_READ|syscall.GENERIC_WRITE, 0, nil,
		syscall.OPEN_ALWAYS, syscall.FILE_ATTRIBUTE_NORMAL, 0)
	if err != nil {
		const errorSharingViolation syscall.Errno = 32
		if errors.Is(err, errorSharingViolation) {
			return nil, errLocked
		}
		return nil, err
	}
	return os.NewFile(uintptr(h), path), nil
}
