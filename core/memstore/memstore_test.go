package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

func TestStoreContract(t *testing.T) {
	idemtest.TestStore(t, func(tb testing.TB) idem.Store {
		s := memstore.New()
		tb.Cleanup(func() { s.Close() })
		return s
	})
}

func TestMaxRecordsRefusesNewKeys(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(memstore.WithMaxRecords(64), memstore.WithPurgeInterval(0))
	now := time.Unix(1_000_000, 0)
	acquire := func(i int, at time.Time) error {
		_, _, err := s.Acquire(ctx, idem.Acquire{ID: idem.ID{Key: fmt.Sprint(i)}, Token: "t", Now: at,
			LeaseUntil: at.Add(time.Second), ExpiresAt: at.Add(time.Minute)})
		return err
	}
	refused := -1
	for i := range 1000 {
		if err := acquire(i, now); errors.Is(err, idem.ErrStoreFull) {
			refused = i
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if refused < 0 || s.Len() > 64 {
		t.Fatalf("store holds %d records and never refused; want at most 64 and ErrStoreFull", s.Len())
	}
	// The store is full; once its records expire, their room is reclaimed
	// on demand, without waiting for the purger.
	if err := acquire(refused, now.Add(time.Hour)); err != nil {
		t.Fatalf("a full shard of expired records still refuses: %v", err)
	}
}

func TestPurgerRunsAndStops(t *testing.T) {
	before := runtime.NumGoroutine()
	now := time.Unix(2_000_000, 0)
	clock := func() time.Time { return now.Add(48 * time.Hour) }
	s := memstore.New(memstore.WithPurgeInterval(5*time.Millisecond), memstore.WithClock(idemtest.ClockOf(clock)), memstore.WithPurgeBatch(3))
	ctx := context.Background()
	for i := range 20 {
		id := idem.ID{Key: fmt.Sprint(i)}
		if _, _, err := s.Acquire(ctx, idem.Acquire{ID: id, Token: "t", Now: now, LeaseUntil: now.Add(time.Second), ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Len() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("purger left %d expired records", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.Close() // a second Close is harmless
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if runtime.NumGoroutine() <= before {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("goroutines: %d before New, %d after Close", before, runtime.NumGoroutine())
}

// The purger runs on its clock: a clock moved by hand (idemtest.Clock)
// moves it, pass by pass, and each pass deletes every record expired by
// the clock's time, batch after batch, and nothing else.
func TestPurgerRunsOnItsClock(t *testing.T) {
	clock := idemtest.NewClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
	s := memstore.New(memstore.WithClock(clock), memstore.WithPurgeInterval(time.Minute), memstore.WithPurgeBatch(2))
	defer s.Close()
	ctx := context.Background()
	now := clock.Now()
	for i := range 10 {
		expires := now.Add(30 * time.Second)
		if i%2 == 1 {
			expires = now.Add(90 * time.Second)
		}
		if _, _, err := s.Acquire(ctx, idem.Acquire{ID: idem.ID{Key: fmt.Sprint(i)}, Token: "t", Now: now,
			LeaseUntil: now.Add(time.Second), ExpiresAt: expires}); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		advance time.Duration
		left    int
	}{
		{59 * time.Second, 10}, // no pass yet
		{time.Second, 5},       // the first pass: five expired, three batches
		{30 * time.Second, 5},  // between passes
		{30 * time.Second, 0},  // the second pass
	} {
		clock.Advance(step.advance)
		if n := s.Len(); n != step.left {
			t.Fatalf("at +%v: %d records, want %d", clock.Now().Sub(now), n, step.left)
		}
	}
}

// The default bound holds a day of keys at a realistic rate: the old one,
// 100,000 records, refused new keys after a day at 1.2 a second. Filling
// a million keys would make the test slow; twice the old bound shows it.
func TestDefaultBoundHoldsMoreThanADayAtOneKeyASecond(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(memstore.WithPurgeInterval(0))
	now := time.Now()
	for i := range 200_000 {
		id := idem.ID{Key: strconv.Itoa(i)}
		if _, _, err := s.Acquire(ctx, idem.Acquire{ID: id, Token: "t", Now: now,
			LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(24 * time.Hour)}); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
	}
}

func TestDo(t *testing.T) {
	idemtest.TestDo(t, func(tb testing.TB) idem.Store {
		s := memstore.New(memstore.WithPurgeInterval(0))
		tb.Cleanup(func() { s.Close() })
		return s
	})
}
