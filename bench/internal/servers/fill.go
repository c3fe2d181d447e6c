package servers

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idemkit/bench/internal/httpwire"
	idem "github.com/idemkit/idemkit/core"
)

// FillPrefix is the key prefix of records the fill functions create; the
// load generator's run prefixes never equal it.
const FillPrefix = 0xf111f111

// FillThrough stores n records by sending n requests with new keys through
// inv (the server's own chain, so each record is exactly what a request
// leaves). stream keeps successive fills apart.
func FillThrough(inv Invoker, stream uint16, n int) error {
	key := make([]byte, httpwire.KeyLen)
	for i := range n {
		httpwire.FormatKey(key, FillPrefix, stream, uint64(i))
		if status := inv.Do(key); status != http.StatusCreated {
			return fmt.Errorf("servers: fill request %d answered %d", i, status)
		}
	}
	return nil
}

// RowRange is a range of SQLite rowids.
type RowRange struct{ First, Last int64 }

// CopyRecords stores n records in the SQLite store in bulk, as copies of
// one record made by a real request (so they are what the store would
// hold) with random key columns. With expired set, the template is made at
// a clock two TTLs in the past, so every copy has expired. It returns the
// copies' rowids, consecutive.
//
// Going through the store's API would take minutes for a million records;
// one INSERT ... SELECT takes seconds. The key columns are found from the
// table's primary key, so the copy follows the store's schema.
func (s *Server) CopyRecords(n int, expired bool) (RowRange, error) {
	if s.GORM == nil {
		return RowRange{}, ErrNoStore
	}
	now := time.Now
	if expired {
		now = func() time.Time { return time.Now().Add(-48 * time.Hour) }
	}
	e := idem.New(idem.Config{Store: s.GORM, Clock: readClock(now)})
	inv := &httpInvoker{h: netHTTP(&orders{}, e), w: &discardWriter{header: http.Header{}}}
	key := make([]byte, httpwire.KeyLen)
	httpwire.FormatKey(key, FillPrefix, 0xfff0, uint64(time.Now().UnixNano()))
	if status := inv.Do(key); status != http.StatusCreated {
		return RowRange{}, fmt.Errorf("servers: template request answered %d", status)
	}
	table := s.GORM.Table()
	var tmpl int64
	if err := s.DB.Raw(`SELECT max(rowid) FROM "` + table + `"`).Scan(&tmpl).Error; err != nil {
		return RowRange{}, err
	}
	type column struct {
		Name string
		PK   int
	}
	var cols []column
	if err := s.DB.Raw(`SELECT name, pk FROM pragma_table_info('` + table + `')`).Scan(&cols).Error; err != nil {
		return RowRange{}, err
	}
	names := make([]string, len(cols))
	values := make([]string, len(cols))
	pk := 0
	for i, c := range cols {
		names[i] = `"` + c.Name + `"`
		values[i] = "tpl." + names[i]
		if c.PK > 0 {
			values[i] = "randomblob(32)"
			pk++
		}
	}
	if pk == 0 {
		return RowRange{}, fmt.Errorf("servers: table %s has no primary key to vary", table)
	}
	stmt := `WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?) ` +
		`INSERT INTO "` + table + `" (` + strings.Join(names, ", ") + `) SELECT ` + strings.Join(values, ", ") +
		` FROM c, (SELECT * FROM "` + table + `" WHERE rowid = ?) AS tpl`
	r := RowRange{First: tmpl + 1, Last: tmpl}
	const batch = 100_000 // one transaction each: the WAL is checkpointed between them
	for left := n; left > 0; left -= batch {
		res := s.DB.Exec(stmt, min(left, batch), tmpl)
		if res.Error != nil {
			return r, res.Error
		}
		r.Last += res.RowsAffected
	}
	return r, nil
}

// AnyLeft reports whether a row of r is still in the store's table.
func (s *Server) AnyLeft(r RowRange) (bool, error) {
	var n int64
	err := s.DB.Raw(`SELECT count(*) FROM (SELECT 1 FROM "`+s.GORM.Table()+`" WHERE rowid BETWEEN ? AND ? LIMIT 1)`,
		r.First, r.Last).Scan(&n).Error
	return n > 0, err
}

// CountRows returns the number of rows in the store's table.
func (s *Server) CountRows() (int64, error) {
	var n int64
	err := s.DB.Raw(`SELECT count(*) FROM "` + s.GORM.Table() + `"`).Scan(&n).Error
	return n, err
}

// readClock is the system clock read through now: records get now's times,
// timers run in real time.
type readClock func() time.Time

func (c readClock) Now() time.Time                               { return c() }
func (readClock) AfterFunc(d time.Duration, f func()) idem.Timer { return time.AfterFunc(d, f) }
