// Package sqlitefile checks an SQLite database file before gormstore and
// sqlitedb use it.
package sqlitefile

import (
	"errors"
	"fmt"
	"io/fs"
)

// OneName returns an error naming the file at path if it has more than one
// name (hard links), nil if it has one or does not exist yet.
//
// SQLite names a database's write-ahead log and the log's index after the
// path the database was opened by, and gormstore its one-process lock: a
// process on another name of the file would take another lock and write
// another log of the same database, beside a process on this name, which
// corrupts it. In one process, SQLite shares the log's index between the
// names, which then disagrees with either log. A name the file gets after
// the check harms nobody yet: whoever opens the file by either name from
// then on is refused.
func OneName(path string) error {
	n, err := links(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("count the names of the SQLite file %q: %w", path, err)
	case n > 1:
		return fmt.Errorf("the SQLite file %q has %d names (hard links): one is the most it may have, as SQLite's "+
			"write-ahead log and idemkit's one-process lock are named after the path, and a process on another "+
			"name would write the database beside one on this name and corrupt it; remove the other names "+
			"(find -samefile lists them), or copy the file", path, n)
	}
	return nil
}
