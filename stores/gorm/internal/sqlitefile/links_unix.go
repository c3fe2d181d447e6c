//go:build unix

package sqlitefile

import (
	"errors"
	"os"
	"syscall"
)

// links returns the number of names of the file at path.
func links(path string) (uint64, error) {
	info, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, errors.New("no link count in the file's status")
	}
	return uint64(st.Nlink), nil
}
