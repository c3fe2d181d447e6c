package idemtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// TestDo holds a store to what Engine.Do promises jobs, webhooks and
// queue consumers: one run per key, its result or permanent failure
// returned to every later delivery, ErrInProgress while it runs,
// ErrKeyReused for another payload, and a failure that is not permanent
// (or a panic) leaving the key free for the next delivery. newStore makes
// a fresh, empty store for each subtest.
func TestDo(t *testing.T, newStore func(testing.TB) idem.Store) {
	t.Helper()
	for _, c := range jobCases {
		t.Run(c.name, func(t *testing.T) {
			clock := NewClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
			e := idem.New(idem.Config{Store: newStore(t), Clock: clock, Logger: slog.New(slog.DiscardHandler)})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c.run(t, ctx, &jobEnv{e: e, clock: clock})
		})
	}
}

type jobEnv struct {
	e     *idem.Engine
	clock *Clock
	runs  atomic.Int64
}

// job is the suite's job: it counts its runs and returns "result <n>".
func (j *jobEnv) job(context.Context) ([]byte, error) {
	return fmt.Appendf(nil, "result %d", j.runs.Add(1)), nil
}

func settle(id string) idem.Job {
	return idem.Job{Scope: "acct_1", Key: id, Name: "settle", Payload: []byte(`{"charge":"ch_1","amount":1999}`)}
}

var jobCases = []struct {
	name string
	run  func(*testing.T, context.Context, *jobEnv)
}{
	{"Once/ResultReturnedAgain", func(t *testing.T, ctx context.Context, j *jobEnv) {
		first, err := j.e.Do(ctx, settle("evt_1"), j.job)
		if err != nil || string(first) != "result 1" {
			t.Fatalf("first delivery: %q, %v", first, err)
		}
		for range 3 {
			again, err := j.e.Do(ctx, settle("evt_1"), j.job)
			if err != nil || string(again) != "result 1" {
				t.Fatalf("redelivery: %q, %v; want the first result", again, err)
			}
		}
		if n := j.runs.Load(); n != 1 {
			t.Fatalf("the job ran %d times, want once", n)
		}
	}},
	{"Once/KeysAndScopesApart", func(t *testing.T, ctx context.Context, j *jobEnv) {
		other := settle("evt_1")
		other.Scope = "acct_2"
		for _, job := range []idem.Job{settle("evt_1"), settle("evt_2"), other} {
			if _, err := j.e.Do(ctx, job, j.job); err != nil {
				t.Fatal(err)
			}
		}
		if n := j.runs.Load(); n != 3 {
			t.Fatalf("three keys ran %d times, want 3", n)
		}
	}},
	{"InProgress", func(t *testing.T, ctx context.Context, j *jobEnv) {
		entered, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := j.e.Do(ctx, settle("evt_1"), func(context.Context) ([]byte, error) {
				close(entered)
				<-release
				return []byte("slow"), nil
			})
			done <- err
		}()
		<-entered
		if _, err := j.e.Do(ctx, settle("evt_1"), j.job); !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("delivery while the first runs: %v, want ErrInProgress", err)
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got, err := j.e.Do(ctx, settle("evt_1"), j.job); err != nil || string(got) != "slow" {
			t.Fatalf("after the first ended: %q, %v", got, err)
		}
	}},
	{"KeyReused", func(t *testing.T, ctx context.Context, j *jobEnv) {
		if _, err := j.e.Do(ctx, settle("evt_1"), j.job); err != nil {
			t.Fatal(err)
		}
		other := settle("evt_1")
		other.Payload = []byte(`{"charge":"ch_1","amount":2999}`)
		renamed := settle("evt_1")
		renamed.Name = "refund"
		for _, job := range []idem.Job{other, renamed} {
			if _, err := j.e.Do(ctx, job, j.job); !errors.Is(err, idem.ErrKeyReused) {
				t.Fatalf("%s %s under a used key: %v, want ErrKeyReused", job.Name, job.Payload, err)
			}
		}
		if n := j.runs.Load(); n != 1 {
			t.Fatalf("the job ran %d times, want once", n)
		}
	}},
	{"Failure/RunsAgain", func(t *testing.T, ctx context.Context, j *jobEnv) {
		failing := errors.New("provider timed out")
		if _, err := j.e.Do(ctx, settle("evt_1"), func(context.Context) ([]byte, error) { return nil, failing }); !errors.Is(err, failing) {
			t.Fatalf("failing run: %v, want the job's own error", err)
		}
		if got, err := j.e.Do(ctx, settle("evt_1"), j.job); err != nil || string(got) != "result 1" {
			t.Fatalf("delivery after a failure: %q, %v; want the job run again", got, err)
		}
	}},
	{"Failure/PermanentRecorded", func(t *testing.T, ctx context.Context, j *jobEnv) {
		declined := errors.New("card declined")
		_, err := j.e.Do(ctx, settle("evt_1"), func(context.Context) ([]byte, error) { return nil, idem.Permanent(declined) })
		var perm *idem.PermanentError
		if !errors.As(err, &perm) || !errors.Is(err, declined) {
			t.Fatalf("permanent failure: %v, want a PermanentError wrapping the job's error", err)
		}
		for range 2 {
			_, err := j.e.Do(ctx, settle("evt_1"), j.job)
			if !errors.As(err, &perm) || perm.Msg != "card declined" {
				t.Fatalf("redelivery after a permanent failure: %v, want it again", err)
			}
		}
		if n := j.runs.Load(); n != 0 {
			t.Fatalf("the job ran %d more times, want none", n)
		}
	}},
	{"Failure/PanicReleases", func(t *testing.T, ctx context.Context, j *jobEnv) {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("the job's panic did not go on")
				}
			}()
			_, _ = j.e.Do(ctx, settle("evt_1"), func(context.Context) ([]byte, error) { panic("job panic") })
		}()
		if got, err := j.e.Do(ctx, settle("evt_1"), j.job); err != nil || string(got) != "result 1" {
			t.Fatalf("delivery after a panic: %q, %v; want the job run again", got, err)
		}
	}},
	{"Context/HeldKey", func(t *testing.T, ctx context.Context, j *jobEnv) {
		var held idem.Held
		var ok bool
		if _, err := j.e.Do(ctx, settle("evt_1"), func(ctx context.Context) ([]byte, error) {
			held, ok = idem.HeldKey(ctx)
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
		if !ok || held.ID != (idem.ID{Scope: "acct_1", Key: "evt_1"}) || held.Token == "" {
			t.Fatalf("the job saw %+v (%v), want its key, scope and a token", held, ok)
		}
	}},
	{"Expiry/NewAgain", func(t *testing.T, ctx context.Context, j *jobEnv) {
		if _, err := j.e.Do(ctx, settle("evt_1"), j.job); err != nil {
			t.Fatal(err)
		}
		j.clock.Advance(j.e.Config().TTL)
		if got, err := j.e.Do(ctx, settle("evt_1"), j.job); err != nil || string(got) != "result 2" {
			t.Fatalf("delivery after the record expired: %q, %v; want a new run", got, err)
		}
	}},
}
