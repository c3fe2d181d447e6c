package redisstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// responseVersion is the first byte of a stored response, so that a later
// release can change the layout and still read what this one wrote.
const responseVersion = 1

// encodeResponse lays a response out as one string: version, status,
// header fields (name and values, each length-prefixed) and the body,
// which runs to the end. Copying into a buffer of its own is also what
// lets the Engine reuse the memory of r once Complete returns.
func encodeResponse(r idem.Response) []byte {
	n := 1 + binary.MaxVarintLen64*2 + len(r.Body)
	for _, f := range r.Header {
		n += binary.MaxVarintLen64*2 + len(f.Name)
		for _, v := range f.Values {
			n += binary.MaxVarintLen64 + len(v)
		}
	}
	b := make([]byte, 0, n)
	b = append(b, responseVersion)
	b = binary.AppendUvarint(b, uint64(r.Status))
	b = binary.AppendUvarint(b, uint64(len(r.Header)))
	for _, f := range r.Header {
		b = binary.AppendUvarint(b, uint64(len(f.Name)))
		b = append(b, f.Name...)
		b = binary.AppendUvarint(b, uint64(len(f.Values)))
		for _, v := range f.Values {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return append(b, r.Body...)
}

var errCorrupt = errors.New("redisstore: corrupt stored response")

// decodeResponse reads what encodeResponse wrote. Strings and the body are
// cut from one copy of s, so a replay costs few allocations.
func decodeResponse(s string) (idem.Response, error) {
	b := []byte(s)
	if len(b) == 0 || b[0] != responseVersion {
		return idem.Response{}, errCorrupt
	}
	b = b[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	str := func() (string, bool) {
		l, ok := next()
		if !ok || l > uint64(len(b)) {
			return "", false
		}
		v := string(b[:l])
		b = b[l:]
		return v, true
	}
	status, ok := next()
	if !ok || status > 999 {
		return idem.Response{}, errCorrupt
	}
	nf, ok := next()
	if !ok || nf > uint64(len(b)) {
		return idem.Response{}, errCorrupt
	}
	r := idem.Response{Status: int(status)}
	if nf > 0 {
		r.Header = make([]idem.HeaderField, nf)
	}
	for i := range r.Header {
		name, ok := str()
		if !ok {
			return idem.Response{}, errCorrupt
		}
		nv, ok := next()
		if !ok || nv > uint64(len(b)) {
			return idem.Response{}, errCorrupt
		}
		f := idem.HeaderField{Name: name, Values: make([]string, nv)}
		for j := range f.Values {
			if f.Values[j], ok = str(); !ok {
				return idem.Response{}, errCorrupt
			}
		}
		r.Header[i] = f
	}
	r.Body = b
	return r, nil
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
