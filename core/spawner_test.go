package idem_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemtest"
	"github.com/idemkit/idemkit/core/memstore"
)

type countRenewals struct {
	idem.Store
	renewals atomic.Int64
}

func (s *countRenewals) Renew(ctx context.Context, id idem.ID, token string, until time.Time) error {
	s.renewals.Add(1)
	return s.Store.Renew(ctx, id, token, until)
}

// countingSpawner is the test clock, counting the goroutines it is asked
// to start.
type countingSpawner struct {
	*idemtest.Clock
	spawned atomic.Int64
}

func (c *countingSpawner) Go(f func()) {
	c.spawned.Add(1)
	c.Clock.Go(f)
}

// A Clock with a Go method starts the Engine's renewal calls:
// none runs on a goroutine of its own, so a simulation decides when each
// one happens.
func TestSpawnerStartsRenewals(t *testing.T) {
	mem := memstore.New(memstore.WithPurgeInterval(0))
	defer mem.Close()
	store := &countRenewals{Store: mem}
	clock := &countingSpawner{Clock: idemtest.NewClock(time.Date(2031, 5, 1, 12, 0, 0, 0, time.UTC))}
	e := idem.New(idem.Config{
		Store: store, Clock: clock, Lease: 30 * time.Second, RenewEvery: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	d := e.Adapter().Begin(context.Background(), exchange.Request{Method: "POST", Path: "/p", KeyLines: []string{`"k"`}, Body: []byte{}})
	if d.Action != exchange.Run {
		t.Fatalf("Begin: action %v, want Run", d.Action)
	}
	clock.Advance(10 * time.Second) // the first renewal is due, and runs as Advance returns
	if n := clock.spawned.Load(); n != 1 {
		t.Fatalf("the clock was asked to start %d goroutines, want 1 renewal worker", n)
	}
	if n := store.renewals.Load(); n != 1 {
		t.Fatalf("%d renewals once Advance returned, want 1", n)
	}
	if err := recorded(d.Lock.Finish(context.Background(), 201, nil)); err != nil {
		t.Fatal(err)
	}
}
