package idem_test

import (
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// TestRecordExpired pins the boundaries: a record no longer holds its key
// from the instant ExpiresAt is reached (not one tick later), and an
// in-flight record only once its lease has run out as well.
func TestRecordExpired(t *testing.T) {
	at := time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC)
	for _, c := range []struct {
		name string
		rec  idem.Record
		now  time.Time
		want bool
	}{
		{"completed, just before", idem.Record{State: idem.Completed, ExpiresAt: at}, at.Add(-time.Nanosecond), false},
		{"completed, at ExpiresAt", idem.Record{State: idem.Completed, ExpiresAt: at}, at, true},
		{"completed, after", idem.Record{State: idem.Completed, ExpiresAt: at}, at.Add(time.Nanosecond), true},
		{"in flight, lease renewed past ExpiresAt", idem.Record{State: idem.InFlight, ExpiresAt: at, LeaseUntil: at.Add(time.Second)}, at, false},
		{"in flight, lease ends at ExpiresAt", idem.Record{State: idem.InFlight, ExpiresAt: at, LeaseUntil: at}, at, true},
		{"in flight, lease ended, before ExpiresAt", idem.Record{State: idem.InFlight, ExpiresAt: at, LeaseUntil: at.Add(-time.Hour)}, at.Add(-time.Nanosecond), false},
		{"in flight, lease ends just after now", idem.Record{State: idem.InFlight, ExpiresAt: at.Add(-time.Hour), LeaseUntil: at.Add(time.Nanosecond)}, at, false},
	} {
		if got := c.rec.Expired(c.now); got != c.want {
			t.Errorf("%s: Expired = %v, want %v", c.name, got, c.want)
		}
	}
}
