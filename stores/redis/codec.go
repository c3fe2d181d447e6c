package redisstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/internal/storecodec"
)

// responseVersion is the first byte of a stored response, so that a later
// release can change the layout and still read what this one wrote.
const responseVersion = 1

// encodeResponse lays a response out as one string: version, status, the
// header fields in the encoding every idemkit store shares (package
// storecodec), and the body, which runs to the end. Copying into a buffer
// of its own is also what lets the Engine reuse the memory of r once
// Complete returns.
func encodeResponse(r exchange.Response) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+storecodec.HeaderSize(r.Header)+len(r.Body))
	b = append(b, responseVersion)
	b = binary.AppendUvarint(b, uint64(r.Status))
	b = storecodec.AppendHeader(b, r.Header)
	return append(b, r.Body...)
}

var errCorrupt = errors.New("redisstore: corrupt stored response")

// decodeResponse reads what encodeResponse wrote. The body is cut from
// one copy of s, the header's strings from one string.
func decodeResponse(s string) (exchange.Response, error) {
	b := []byte(s)
	if len(b) == 0 || b[0] != responseVersion {
		return exchange.Response{}, errCorrupt
	}
	status, n := binary.Uvarint(b[1:])
	if n <= 0 || status > 999 || n > 1 && b[n] == 0 {
		return exchange.Response{}, errCorrupt
	}
	h, body, err := storecodec.ReadHeader(b[1+n:])
	if err != nil {
		return exchange.Response{}, errCorrupt
	}
	return exchange.Response{Status: int(status), Header: h, Body: body}, nil
}

// ttlMillis is the TTL, in whole milliseconds rounded up, of a key that
// must live until until, counted from from: two times the Engine passes.
// A relative TTL (PEXPIRE) starts when Redis runs the script, which is
// never before the Engine read from, so Redis removes a record no earlier
// than the Engine's clock says it expires, whatever the offset between
// Redis's clock and the instances'; and the Engine's times may be
// anything (a simulated clock years away) without Redis removing a live
// record at once, which an absolute PEXPIREAT would do.
func ttlMillis(until, from time.Time) int64 {
	d := until.Sub(from)
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	return max(ms, 1)
}

// recordValues are the values of recordFields, as Redis returns them.
type recordValues []any

// decodeRecord builds the record of id from the values of recordFields.
// A missing state means there is no record.
func decodeRecord(id idem.ID, v recordValues) (idem.Record, error) {
	if len(v) != len(recordFields) {
		return idem.Record{}, fmt.Errorf("redisstore: %d record fields, want %d", len(v), len(recordFields))
	}
	if v[0] == nil {
		return idem.Record{}, idem.ErrNotFound
	}
	var (
		rec = idem.Record{ID: id}
		err error
	)
	str := func(i int) string {
		s, ok := v[i].(string)
		if !ok && v[i] != nil && err == nil {
			err = fmt.Errorf("redisstore: record field %s is %T", recordFields[i], v[i])
		}
		return s
	}
	at := func(i int) time.Time {
		if v[i] == nil {
			return time.Time{}
		}
		sec, err1 := strconv.ParseInt(str(i), 10, 64)
		nsec, err2 := strconv.ParseInt(str(i+1), 10, 64)
		if (err1 != nil || err2 != nil) && err == nil {
			err = fmt.Errorf("redisstore: record time %s is not a number", recordFields[i])
		}
		return time.Unix(sec, nsec)
	}
	switch str(0) {
	case "1":
		rec.State = idem.InFlight
	case "2":
		rec.State = idem.Completed
	default:
		return idem.Record{}, fmt.Errorf("redisstore: record state %q", str(0))
	}
	if fp := str(1); len(fp) == len(rec.Fingerprint) {
		copy(rec.Fingerprint[:], fp)
	} else if err == nil {
		err = fmt.Errorf("redisstore: fingerprint of %d bytes", len(fp))
	}
	rec.Token = str(2)
	rec.LeaseUntil = at(3)
	rec.ExpiresAt = at(5)
	rec.CreatedAt = at(7)
	rec.CompletedAt = at(9)
	if rec.State == idem.Completed && err == nil {
		rec.Response, err = decodeResponse(str(11))
	}
	if err != nil {
		return idem.Record{}, err
	}
	return rec, nil
}
