package idemtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// TestDo holds a store to what Engine.Do promises jobs, webhooks and
// queue consumers: one run per key, its result or permanent failure
// returned to every later delivery, ErrInProgress while it runs,
// ErrKeyReused for another payload, and a failure that is not permanent
// (or a panic) leaving the key free for the next delivery. newStore makes
// a fresh, empty store for each subtest.
//
// It holds Do to the entry points' rule too: success (a result, or a
// *PermanentError) only for an outcome that was recorded, exactly one
// success per key when a run loses its lease to another, and a key space
// no request reaches.
func TestDo(t *testing.T, newStore func(testing.TB) idem.Store) {
	t.Helper()
	for _, c := range jobCases {
		t.Run(c.name, func(t *testing.T) {
			clock := NewClock(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC))
			cfg := idem.Config{Store: newStore(t), Clock: clock, Logger: slog.New(slog.DiscardHandler)}
			if c.config != nil {
				c.config(&cfg)
			}
			e := idem.New(cfg)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c.run(t, ctx, &jobEnv{e: e, clock: clock, release: make(chan struct{})})
		})
	}
}

type jobEnv struct {
	e       *idem.Engine
	clock   *Clock
	runs    atomic.Int64
	release chan struct{} // closed to let a held job return
}

// job is the suite's job: it counts its runs and returns "result <n>".
func (j *jobEnv) job(context.Context) ([]byte, error) {
	return fmt.Appendf(nil, "result %d", j.runs.Add(1)), nil
}

func settle(id string) idem.Job {
	return idem.Job{Scope: "acct_1", Key: id, Name: "settle", Payload: []byte(`{"charge":"ch_1","amount":1999}`)}
}

var jobCases = []struct {
	name   string
	run    func(*testing.T, context.Context, *jobEnv)
	config func(*idem.Config) // nil: the suite's defaults
}{
	{name: "Once/ResultReturnedAgain", run: func(t *testing.T, ctx context.Context, j *jobEnv) {
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
	{name: "Once/KeysAndScopesApart", run: func(t *testing.T, ctx context.Context, j *jobEnv) {
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
	{name: "InProgress", run: func(t *testing.T, ctx context.Context, j *jobEnv) {
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
	{name: "KeyReused", run: func(t *testing.T, ctx context.Context, j *jobEnv) {
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
	{name: "Failure/RunsAgain", run: func(t *testing.T, ctx context.Context, j *jobEnv) {
		failing := errors.New("provider timed out")
		if _, err := j.e.Do(ctx, settle("evt_1"), func(context.Context) ([]byte, error) { return nil, failing }); !errors.Is(err, failing) {
			t.Fatalf("failing run: %v, want the job's own error", err)
		}
		if got, err := j.e.Do(ctx, settle("evt_1"), j.job); err != nil || string(got) != "result 1" {
			t.Fatalf("delivery after a failure: %q, %v; want the job run again", got, err)
		}
	}},
	{name: "Failure/PermanentRecorded", run: func(t *testing.T, ctx context.Context, j *jobEnv) {
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
	{name: "Failure/PanicReleases", run: func(t *testing.T, ctx context.Context, j *jobEnv) {
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
	{name: "Context/HeldKey", run: func(t *testing.T, ctx context.Context, j *jobEnv) {
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
	{name: "Expiry/NewAgain", run: func(t *testing.T, ctx context.Context, j *jobEnv) {
		if _, err := j.e.Do(ctx, settle("evt_1"), j.job); err != nil {
			t.Fatal(err)
		}
		j.clock.Advance(j.e.Config().TTL)
		if got, err := j.e.Do(ctx, settle("evt_1"), j.job); err != nil || string(got) != "result 2" {
			t.Fatalf("delivery after the record expired: %q, %v; want a new run", got, err)
		}
	}},
	{name: "Key/Empty", run: func(t *testing.T, ctx context.Context, j *jobEnv) {
		if _, err := j.e.Do(ctx, idem.Job{Scope: "acct_1", Name: "settle"}, j.job); !errors.Is(err, idem.ErrKeyInvalid) {
			t.Fatalf("a job without a key: %v, want ErrKeyInvalid", err)
		}
		if n := j.runs.Load(); n != 0 {
			t.Fatalf("the job ran %d times, want none", n)
		}
	}},
	{name: "NotRecorded/StoreFails", config: failCompletions, run: func(t *testing.T, ctx context.Context, j *jobEnv) {
		// The store cannot keep the outcome: the work ran and stands, and
		// Do says that nothing guards the key, with the result in hand.
		got, err := j.e.Do(ctx, settle("evt_1"), j.job)
		if !errors.Is(err, idem.ErrNotRecorded) || !errors.Is(err, errCompleteFails) || string(got) != "result 1" {
			t.Fatalf("a run whose outcome the store failed to keep: %q, %v; want its result with ErrNotRecorded and the store's error", got, err)
		}
		// Nothing guards the key: the next delivery runs the job again.
		if got, err := j.e.Do(ctx, settle("evt_1"), j.job); !errors.Is(err, idem.ErrNotRecorded) || string(got) != "result 2" {
			t.Fatalf("the next delivery: %q, %v; want a second run, not recorded either", got, err)
		}
	}},
	{name: "NotRecorded/TooLarge", config: smallResults, run: func(t *testing.T, ctx context.Context, j *jobEnv) {
		big := func(context.Context) ([]byte, error) { j.runs.Add(1); return bytes.Repeat([]byte("x"), 100), nil }
		got, err := j.e.Do(ctx, settle("evt_1"), big)
		if !errors.Is(err, idem.ErrNotRecorded) || len(got) != 100 {
			t.Fatalf("a result over MaxResponseBody: %d bytes, %v; want the result with ErrNotRecorded", len(got), err)
		}
		if _, err := j.e.Do(ctx, settle("evt_1"), big); !errors.Is(err, idem.ErrNotRecorded) || j.runs.Load() != 2 {
			t.Fatalf("the next delivery: %v after %d runs; want it run again, and not recorded", err, j.runs.Load())
		}
	}},
	{name: "NotRecorded/PermanentTooLarge", config: smallResults, run: func(t *testing.T, ctx context.Context, j *jobEnv) {
		declined := errors.New(strings.Repeat("card declined ", 10))
		_, err := j.e.Do(ctx, settle("evt_1"), func(context.Context) ([]byte, error) { return nil, idem.Permanent(declined) })
		var perm *idem.PermanentError
		if !errors.Is(err, idem.ErrNotRecorded) || !errors.As(err, &perm) || !errors.Is(err, declined) {
			t.Fatalf("a permanent failure over MaxResponseBody: %v; want it with ErrNotRecorded", err)
		}
		if got, err := j.e.Do(ctx, settle("evt_1"), j.job); err != nil || string(got) != "result 1" {
			t.Fatalf("the next delivery: %q, %v; want the job run, as nothing was recorded", got, err)
		}
	}},
	{name: "LeaseLost/OneSuccess", config: cutOffRenewals, run: func(t *testing.T, ctx context.Context, j *jobEnv) {
		// The first run's renewals fail, so its lease runs out and it is
		// told (ErrLeaseLost); a second delivery takes the key over and
		// records its result. The first run returns a result anyway: its
		// Do must not report success too.
		entered, told := make(chan struct{}), make(chan struct{})
		type outcome struct {
			result []byte
			err    error
		}
		first := make(chan outcome, 1)
		go func() {
			got, err := j.e.Do(ctx, settle("evt_1"), func(ctx context.Context) ([]byte, error) {
				close(entered)
				<-ctx.Done()
				if !errors.Is(context.Cause(ctx), idem.ErrLeaseLost) {
					t.Errorf("the first run was stopped with %v, want ErrLeaseLost", context.Cause(ctx))
				}
				close(told)
				<-j.release
				return []byte("first"), nil
			})
			first <- outcome{got, err}
		}()
		<-entered
		j.clock.Advance(j.e.Config().Lease)
		recvJob(t, told, "the first run's lost lease")
		second, err := j.e.Do(ctx, settle("evt_1"), func(context.Context) ([]byte, error) { return []byte("second"), nil })
		if err != nil || string(second) != "second" {
			t.Fatalf("the delivery that took the key over: %q, %v; want its own result", second, err)
		}
		close(j.release)
		got := recvJob(t, first, "the first run's end")
		if got.err == nil || !errors.Is(got.err, idem.ErrLockLost) || got.result != nil {
			t.Fatalf("the run that lost its key returned %q, %v; want no result and ErrLockLost: only one run of a key reports success", got.result, got.err)
		}
		if again, err := j.e.Do(ctx, settle("evt_1"), j.job); err != nil || string(again) != "second" {
			t.Fatalf("a later delivery: %q, %v; want the second run's result", again, err)
		}
	}},
	{name: "KeySpace/RequestsApart", run: func(t *testing.T, ctx context.Context, j *jobEnv) {
		// A request whose key header names a job's key (here, an event's
		// id) in the job's scope must not reach the job's record, nor a
		// job a request's: a client cannot block a job, or a job a client.
		request := func(key string) exchange.Decision {
			return j.e.Adapter().Begin(ctx, exchange.Request{Method: "POST", Path: "/v1/charges", Scope: "acct_1",
				KeyLines: []string{key}, ContentType: "application/json", Body: []byte(`{}`)})
		}
		d := request("evt_1")
		if d.Action != exchange.Run {
			t.Fatalf("the first request with key evt_1: %+v, want it run", d)
		}
		_, _ = d.Lock.Write([]byte(`{"ok":true}`))
		if f := d.Lock.Finish(ctx, 201, nil); f.Outcome != exchange.Recorded {
			t.Fatalf("the request's response: %v (%s, %v), want it recorded", f.Outcome, f.Reason, f.Err)
		}
		if got, err := j.e.Do(ctx, settle("evt_1"), j.job); err != nil || string(got) != "result 1" {
			t.Fatalf("the job evt_1 after a request with that key: %q, %v; want it run", got, err)
		}
		if got, err := j.e.Do(ctx, settle("evt_2"), j.job); err != nil || string(got) != "result 2" {
			t.Fatal(got, err)
		}
		if d := request("evt_2"); d.Action != exchange.Run {
			t.Fatalf("a request with key evt_2 after the job evt_2: %+v, want it run", d.Response)
		} else {
			d.Lock.Abandon(ctx, exchange.ReasonPanic)
		}
		// HeldKey gives a job its scope and key as given.
		if _, err := j.e.Do(ctx, settle("evt_3"), func(ctx context.Context) ([]byte, error) {
			if h, ok := idem.HeldKey(ctx); !ok || h.ID != (idem.ID{Scope: "acct_1", Key: "evt_3"}) {
				t.Errorf("HeldKey in a job: %+v, %v", h, ok)
			}
			return nil, nil
		}); err != nil {
			t.Fatal(err)
		}
	}},
}

// recvJob receives from ch, or fails the test naming what never came.
func recvJob[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s never came", what)
		panic("unreachable")
	}
}

// smallResults sets a MaxResponseBody of 64 bytes.
func smallResults(c *idem.Config) { c.MaxResponseBody = 64 }

// failCompletions configures a store whose Complete always fails, as a
// store that goes down while the work runs.
func failCompletions(c *idem.Config) { c.Store = CompletionsFail(c.Store, errCompleteFails) }

var errCompleteFails = errors.New("idemtest: the store went away before the completion")
