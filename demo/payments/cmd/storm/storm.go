package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idemkit/core/idemclient"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/redisserver"
)

// Options configure a storm.
type Options struct {
	// Target is the base URL of a running demo; empty starts one in this
	// process on a fresh SQLite file (or on DB, if set).
	Target string
	// AdminTarget is the base URL serving GET /debug/provider for Target,
	// if not Target itself: a demo started with -admin-addr serves it on
	// that listener.
	AdminTarget string
	Framework   string
	DB          string

	Charges     int
	Concurrency int
	Faults      Faults
	// AttemptTimeout is the client's patience per attempt. Below
	// Faults.DelayFor, the client gives up on a delayed request and
	// retries, and the proxy forwards the two together.
	AttemptTimeout time.Duration
	Timeout        time.Duration

	ProviderLatency     time.Duration
	ProviderFailureRate float64

	// Records is where the in-process demo keeps its idempotency records:
	// empty for its database, or a redis:// URL (the demo's -records).
	Records string
	// OwnRedis starts a redis-server for the in-process demo's records
	// (append-only file, fsync every second, on a free loopback port), and
	// stops it afterwards. RedisRestartAfter and RedisFlushEvery imply it.
	OwnRedis bool
	// RedisRestartAfter, if positive, kills that redis-server with SIGKILL
	// this long after the first charge was sent, and starts it again on
	// the same port and files after RedisDown. The run fails if the charges
	// were all answered before.
	RedisRestartAfter time.Duration
	RedisDown         time.Duration
	// RedisFlushEvery, if positive, empties that redis-server (FLUSHALL)
	// this often while the charges are sent: every record written so far is
	// lost, as if Redis had lost what it acknowledged.
	RedisFlushEvery time.Duration
	// Lease is the in-process demo's -lease; zero for its default (30 s),
	// or RedisLease when the records are in Redis.
	Lease time.Duration

	// Refunds is how many of the charges are then refunded, half their
	// amount each, through the proxy as the charges were.
	Refunds int
	// EventsOwnRedis puts the in-process demo's event stream (its
	// -events) in a redis-server the storm starts, which then keeps the
	// records only with OwnRedis; RedisRestartAfter restarts it.
	EventsOwnRedis bool
	// SettleTimeout bounds the wait, once the charges and refunds are
	// made, for the provider's settlement events to settle them all.
	SettleTimeout time.Duration
	// RedeliverAfterTTL, once everything has settled, moves the in-process
	// demo's clock past its TTL, so that every idempotency record has
	// expired, and delivers every settlement event again: by webhook, and
	// with a stream, to its consumer group made anew from 0 (see
	// redeliverAfterTTL). The ledger must still hold one entry each.
	RedeliverAfterTTL bool
	// events is the in-process demo's -events.
	events string

	// Progress receives a progress bar; nil for none.
	Progress io.Writer
}

// RedisLease is the in-process demo's lease when its records are in Redis
// and Options.Lease is zero. A Redis that goes down while charges run
// leaves their keys in flight, answered 409 until the lease ends; a short
// lease lets the storm's retries get through within their budget.
const RedisLease = 2 * time.Second

// DefaultOptions is the storm's default run: 2,000 charges and 400
// refunds, 30% of requests and webhooks broken by the proxy.
func DefaultOptions() Options {
	return Options{
		Framework:           "gin",
		Charges:             2000,
		Concurrency:         50,
		Faults:              Faults{Reset: 0.10, Drop: 0.10, Delay: 0.10, DelayFor: time.Second},
		AttemptTimeout:      250 * time.Millisecond,
		Timeout:             5 * time.Minute,
		ProviderLatency:     5 * time.Millisecond,
		ProviderFailureRate: 0.05,
		RedisDown:           time.Second,
		Refunds:             400,
		SettleTimeout:       2 * time.Minute,
	}
}

// Report is what a storm found.
type Report struct {
	Charges     int
	Concurrency int
	Attempts    int64
	Retries     int64
	Replays     int64
	Unsettled   int // charges the client gave up on, settled afterwards without faults
	Forwarded   int64
	Resets      int64
	Drops       int64
	Delays      int64
	// Late counts delayed requests that reached the server after their
	// client had given up, beside the retry.
	Late int64
	// Conflicts counts the server's 409 answers; PairConflicts those
	// between a delayed request and the retry sent beside it.
	Conflicts     int64
	PairConflicts int64
	// StoreDown counts the server's 503 store-unavailable answers (its
	// idempotency store could not be reached), each retried by its client.
	StoreDown int64
	Expected  balance
	Found     balance
	// Authorizations counts the times the payment provider took money for
	// the storm's account, and ProviderCalls the requests it got.
	Authorizations int64
	ProviderCalls  int64
	// Duplicates counts the rows beyond the first for a charge sent, Lost
	// the charges sent without a row, and Mismatched the rows with another
	// amount than the charge sent, or for no charge sent at all.
	Duplicates int64
	Lost       int64
	Mismatched int64
	Elapsed    time.Duration

	// Records says where the in-process demo kept its records: "" for its
	// database, or the Redis URL.
	Records string
	// RedisRestarts counts the restarts of the storm's redis-server, and
	// RedisDowntime is how long it was gone; RedisFlushes counts the times
	// it was emptied.
	RedisRestarts int
	RedisDowntime time.Duration
	RedisFlushes  int
	// Existing counts the charges, refunds and events the in-process
	// demo answered with the row already written under their key, because
	// their record was lost or their lease taken over (records in Redis
	// only); -1 for a -target.
	Existing int64

	// Refunds counts the refunds sent; ExpectedRefunds and FoundRefunds
	// the refunds expected and found, with their total.
	Refunds         int
	ExpectedRefunds refunds
	FoundRefunds    refunds
	// Events is what became of the provider's settlement events.
	Events events
	// Answers is what the charges' and refunds' keys were answered: every
	// later 201 of a key, whether the proxy passed it, the client got it
	// straight from the server, or the storm sent the request again once
	// everything had settled, held against the key's first byte for byte.
	Answers answerCounts
	// Redelivery is what the storm did after the TTL (Options'
	// RedeliverAfterTTL); zero without.
	Redelivery redelivery
}

type balance struct {
	Charged int64 `json:"charged"`
	Charges int64 `json:"charges"`
}

type refunds struct {
	Refunded int64 `json:"refunded"`
	Refunds  int64 `json:"refunds"`
}

// events is what a storm found of the settlement events.
type events struct {
	// Stream is the in-process demo's event stream, if it had one.
	Stream string
	// Sent counts the events the provider sent for the storm's account,
	// each once however often it went out, and Deliveries their
	// deliveries: webhook requests (each retry and duplicate) and stream
	// entries. StreamEntries counts the entries the in-process demo added
	// to its stream, StreamClaimed those its consumer claimed after they
	// had been left pending a lease (not acknowledged: another delivery
	// held the event's key, or the store was down).
	Sent, Deliveries, StreamEntries, StreamClaimed int64
	// Webhooks counts the webhook requests that reached the proxy, and
	// Resets, Drops and Delays the faults it injected into them;
	// Conflicts counts the 409s they got (another delivery of the event
	// was being applied).
	Webhooks, Resets, Drops, Delays, Conflicts int64
	// Expected counts the charges and refunds, each settled by one event;
	// Applied the ledger entries found; Twice the entries beyond the first
	// for one charge or refund; Lost the charges and refunds with none; and
	// Mismatched the entries with another amount than their object, or for
	// no object the storm made.
	Expected, Applied, Twice, Lost, Mismatched int64
	// Waited is how long the settlement took after the last refund, and
	// Unacked counts the stream's entries still pending at the end.
	Waited  time.Duration
	Unacked int64
	// Answers holds every 200 a webhook got against the first of its
	// event: one ledger entry, whichever delivery.
	Answers answerCounts
}

// Duplicates counts the deliveries beyond each event's first.
func (e events) Duplicates() int64 { return e.Deliveries - e.Sent }

// OK reports whether every charge and refund happened exactly once, with
// its amount, the provider took the money once per charge, and each
// settlement event was applied exactly once: whether Failures is empty.
func (r Report) OK() bool { return len(r.Failures()) == 0 }

// Failures says what the storm found wrong, one line per check failed.
func (r Report) Failures() []string {
	var f []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			f = append(f, fmt.Sprintf(format, args...))
		}
	}
	e := r.Events
	check(r.Duplicates == 0 && r.Lost == 0 && r.Mismatched == 0 && r.Found == r.Expected,
		"charges: %d duplicates, %d lost, %d mismatched; found %+v, expected %+v", r.Duplicates, r.Lost, r.Mismatched, r.Found, r.Expected)
	check(r.Authorizations == r.Expected.Charges, "%d authorizations for %d charges", r.Authorizations, r.Expected.Charges)
	check(r.FoundRefunds == r.ExpectedRefunds, "refunds found %+v, expected %+v", r.FoundRefunds, r.ExpectedRefunds)
	check(e.Twice == 0 && e.Lost == 0 && e.Mismatched == 0 && e.Applied == e.Expected && e.Expected > 0,
		"settlements: %d applied for %d charges and refunds, %d twice, %d lost, %d mismatched", e.Applied, e.Expected, e.Twice, e.Lost, e.Mismatched)
	check(r.Answers.Changed == 0, "%d answers to charges and refunds differ from their key's first 201, e.g. %s", r.Answers.Changed, r.Answers.Example)
	check(e.Answers.Changed == 0, "%d webhook answers differ from their event's first 200, e.g. %s", e.Answers.Changed, e.Answers.Example)
	return f
}

// Print writes the summary.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "charges sent        %d by %d concurrent clients, through a fault-injecting proxy\n", r.Charges, r.Concurrency)
	switch {
	case r.Records == "" && r.Existing < 0:
		// A -target: where it keeps its records is its own business.
	case r.Records == "":
		fmt.Fprintf(w, "records             in the database, committed with the charges\n")
	default:
		fmt.Fprintf(w, "records             in Redis at %s; charges carry their key under a unique constraint\n", r.Records)
	}
	if r.RedisRestarts > 0 {
		fmt.Fprintf(w, "redis restarts      %d: killed with SIGKILL mid-storm, restarted on its append-only file after %s\n",
			r.RedisRestarts, r.RedisDowntime.Round(time.Millisecond))
	}
	if r.RedisFlushes > 0 {
		fmt.Fprintf(w, "redis flushes       %d: every record written so far deleted (FLUSHALL) mid-storm\n", r.RedisFlushes)
	}
	fmt.Fprintf(w, "requests sent       %d (%d retries)\n", r.Attempts, r.Retries)
	fmt.Fprintf(w, "faults injected     %d into charges and refunds: %d resets before the server, %d responses dropped after it, %d delays\n",
		r.Resets+r.Drops+r.Delays, r.Resets, r.Drops, r.Delays)
	fmt.Fprintf(w, "replays             %d\n", r.Replays)
	fmt.Fprintf(w, "in flight (409)     %d, %d of them between a delayed request and its retry (%d delayed requests arrived after their client gave up)\n",
		r.Conflicts, r.PairConflicts, r.Late)
	if r.StoreDown > 0 || r.RedisRestarts > 0 && r.Records != "" {
		fmt.Fprintf(w, "store unavailable   %d requests answered 503 while the records' store was down, and retried\n", r.StoreDown)
	}
	fmt.Fprintf(w, "settled afterwards  %d\n", r.Unsettled)
	if r.Existing >= 0 {
		fmt.Fprintf(w, "existing rows       %d charges, refunds and events answered with the row their key already had (record lost, expired or lease taken over)\n", r.Existing)
	}
	fmt.Fprintf(w, "charges expected    %d totalling %d\n", r.Expected.Charges, r.Expected.Charged)
	fmt.Fprintf(w, "charges found       %d totalling %d\n", r.Found.Charges, r.Found.Charged)
	fmt.Fprintf(w, "authorizations      %d at the payment provider (%d calls)\n", r.Authorizations, r.ProviderCalls)
	fmt.Fprintf(w, "duplicates          %d\n", r.Duplicates)
	fmt.Fprintf(w, "lost                %d\n", r.Lost)
	fmt.Fprintf(w, "mismatched          %d\n", r.Mismatched)
	fmt.Fprintf(w, "refunds             %d sent; %d expected totalling %d, %d found totalling %d\n", r.Refunds,
		r.ExpectedRefunds.Refunds, r.ExpectedRefunds.Refunded, r.FoundRefunds.Refunds, r.FoundRefunds.Refunded)
	a := r.Answers
	fmt.Fprintf(w, "first answers       %d keys of charges and refunds; %d later 201s (%d of them sent again once all had settled) held against their key's first: %d differ\n",
		a.Keys, a.Later, a.Resent, a.Changed)
	e := r.Events
	if e.Stream != "" {
		fmt.Fprintf(w, "event stream        in Redis at %s, read by the demo's consumer group\n", e.Stream)
	}
	fmt.Fprintf(w, "events sent         %d settlement events, one per charge and refund\n", e.Sent)
	fmt.Fprintf(w, "deliveries          %d: %d webhooks through the proxy (%d resets, %d answers dropped, %d delays; %d answered 409), %d stream entries (%d claimed again after a lease pending)\n",
		e.Deliveries, e.Webhooks, e.Resets, e.Drops, e.Delays, e.Conflicts, e.StreamEntries, e.StreamClaimed)
	fmt.Fprintf(w, "duplicates          %d deliveries beyond each event's first\n", e.Duplicates())
	if rd := r.Redelivery; rd.Moved > 0 {
		by := fmt.Sprintf("%d webhooks", rd.Webhooks)
		if e.Stream != "" {
			by += fmt.Sprintf(" and %d of the stream's %d entries read again by the consumer group made anew from 0", rd.Regrouped, rd.Entries)
		}
		fmt.Fprintf(w, "after the TTL       the demo's clock moved %s on (TTL %s), every record expired: %d events delivered again, by %s; %d deliveries answered with the ledger entry already written\n",
			rd.Moved, rd.TTL, rd.Events, by, rd.Existing)
	}
	fmt.Fprintf(w, "webhook answers     %d events; %d later 200s held against their event's first: %d differ\n", e.Answers.Keys, e.Answers.Later, e.Answers.Changed)
	fmt.Fprintf(w, "applied             %d ledger entries for %d charges and refunds (settled %s after the last refund)\n", e.Applied, e.Expected, e.Waited.Round(time.Millisecond))
	fmt.Fprintf(w, "applied twice       %d\n", e.Twice)
	fmt.Fprintf(w, "events lost         %d\n", e.Lost)
	fmt.Fprintf(w, "entries mismatched  %d\n", e.Mismatched)
	if e.Stream != "" {
		fmt.Fprintf(w, "stream unacked      %d entries still pending at the end\n", e.Unacked)
	}
	fmt.Fprintf(w, "elapsed             %s\n", r.Elapsed.Round(time.Millisecond))
}

type charge struct {
	key         string
	amount      int64
	description string // names the charge among the account's rows
	body        []byte
}

// Run starts (or targets) the server, puts the proxy in front, sends the
// charges, then refunds some of them; it holds every charge sent against
// the rows found for it and the provider's authorizations, and, once the
// provider's settlement events have come through the proxy (and the event
// stream), every charge and refund against its ledger entries.
func Run(ctx context.Context, o Options) (Report, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	start := time.Now()
	rep := Report{Charges: o.Charges, Concurrency: o.Concurrency, Existing: -1}

	rs, err := ownRedis(ctx, &o)
	if err != nil {
		return rep, err
	}
	if rs != nil {
		defer rs.Stop() // after the demo's shutdown, deferred below
	}

	backend := strings.TrimSuffix(o.Target, "/")
	var demo *app.App
	var clock *shiftedClock
	if o.RedeliverAfterTTL {
		if backend != "" {
			return rep, errors.New("-redeliver-after-ttl moves the in-process demo's clock: not with -target")
		}
		clock = &shiftedClock{}
	}
	if backend == "" {
		addr, a, stop, err := startServer(ctx, o, clock)
		if err != nil {
			return rep, err
		}
		defer stop()
		backend, demo = addr, a
		rep.Records, rep.Events.Stream = o.Records, o.events
	}
	px := newProxy(backend, o.Faults)
	pxURL, stopProxy, err := serve(px)
	if err != nil {
		return rep, err
	}
	defer stopProxy()
	defer px.drain()
	if demo != nil {
		// Its provider's webhooks go through the proxy, faults and all.
		defer demo.StartEvents(pxURL + api.WebhookPath)()
	}

	account := "storm_" + rand.Text()[:12]
	auth := "Bearer " + account
	charges := make([]charge, o.Charges)
	for i := range charges {
		amount := int64(100 + (i*7919)%9900)
		desc := fmt.Sprintf("storm charge %d", i)
		charges[i] = charge{
			key:         idemclient.NewKey(),
			amount:      amount,
			description: desc,
			body:        fmt.Appendf(nil, `{"amount":%d,"currency":"usd","customer":"cus_%d","description":%q}`, amount, i, desc),
		}
		rep.Expected.Charges++
		rep.Expected.Charged += amount
	}

	client := idemclient.NewClient(idemclient.Config{
		Base:        &http.Transport{MaxIdleConnsPerHost: o.Concurrency},
		MaxAttempts: 12,
		BaseBackoff: 10 * time.Millisecond,
		// The server's 409s ask for Retry-After: 1; a shorter MaxBackoff
		// would hand them back instead of waiting.
		MaxBackoff:     time.Second,
		Budget:         time.Minute,
		AttemptTimeout: o.AttemptTimeout,
	})
	sending := make(chan struct{})
	chaosDone := make(chan chaosResult, 1)
	go func() { chaosDone <- chaos(ctx, o, rs, sending) }()
	chaosOver := func() error {
		close(sending)
		ch := <-chaosDone
		rep.RedisRestarts, rep.RedisDowntime, rep.RedisFlushes = ch.restarts, ch.downtime, ch.flushes
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("storm did not finish within %s: %w", o.Timeout, err)
		}
		return ch.err
	}
	sent := sendAll(ctx, o, "charges", o.Charges, func(i int) (idemclient.Result, string) {
		return post(ctx, client, pxURL, auth, charges[i], nil) // the proxy sees the answers
	})
	if err := ctx.Err(); err != nil {
		chaosOver()
		return rep, fmt.Errorf("storm did not finish within %s: %w", o.Timeout, err)
	}

	// Whatever the proxy still holds reaches the server now, and is
	// answered, before anything is settled or counted.
	px.drain()
	px.resume()

	// Charges whose client gave up are settled straight at the server, with
	// their own keys: each then happened once, or happens now.
	direct := idemclient.NewClient(idemclient.Config{MaxAttempts: 20, Budget: time.Minute})
	seen := &px.answers // the charges' and refunds' answers, whichever way they come
	for _, i := range sent.unsettled {
		if res, failure := post(ctx, direct, backend, auth, charges[i], seen); failure != "" {
			chaosOver()
			return rep, fmt.Errorf("charge %d could not be settled even without faults: %s after %d attempts",
				i, failure, res.Attempts)
		}
	}

	rows, err := fetchCharges(ctx, backend, auth)
	if err != nil {
		chaosOver()
		return rep, err
	}
	rep.check(charges, rows)
	refunds, refundReqs, err := rep.refund(ctx, o, client, direct, pxURL, backend, auth, charges, rows, seen)
	if err != nil {
		chaosOver()
		return rep, err
	}
	waitErr := rep.awaitSettlement(ctx, o, backend, auth)
	if err := chaosOver(); err != nil {
		return rep, err
	}
	if waitErr != nil {
		return rep, waitErr
	}
	// Whatever is still under way (a held webhook, a delivery retried,
	// an entry pending) ends before the ledger is read, so that an event
	// applied twice late is seen.
	px.drain()
	if err := rep.quiesce(ctx, demo); err != nil {
		return rep, err
	}
	// Every charge and refund again, with its key, now that each has been
	// refunded and settled: its first answer, byte for byte.
	again := make([]request, 0, len(charges)+len(refundReqs))
	for _, c := range charges {
		again = append(again, request{path: "/v1/charges", key: c.key, body: c.body})
	}
	if rep.Answers.Resent, err = resend(ctx, o, direct, backend, auth, append(again, refundReqs...), seen); err != nil {
		return rep, err
	}
	if o.RedeliverAfterTTL {
		if err := rep.redeliverAfterTTL(ctx, demo, clock, px, account); err != nil {
			return rep, err
		}
	}
	if err := rep.checkLedger(ctx, backend, auth, rows, refunds); err != nil {
		return rep, err
	}

	admin := strings.TrimSuffix(o.AdminTarget, "/")
	if admin == "" {
		admin = backend
	}
	counts, err := fetchProviderCounts(ctx, admin, auth)
	if err != nil {
		return rep, err
	}
	rep.Authorizations, rep.ProviderCalls = counts.Authorizations, counts.Calls
	rep.Events.Sent, rep.Events.Deliveries = counts.Events, counts.Deliveries
	rep.Attempts, rep.Replays = sent.attempts, sent.replays
	rep.Retries = rep.Attempts - int64(o.Charges)
	rep.Unsettled = len(sent.unsettled)
	rep.Forwarded = px.counts.forwarded.Load()
	rep.Resets, rep.Drops, rep.Delays = px.counts.resets.Load(), px.counts.drops.Load(), px.counts.delays.Load()
	rep.Late = px.counts.late.Load()
	rep.Conflicts, rep.PairConflicts = px.counts.conflicts.Load(), px.counts.pairConflicts.Load()
	rep.StoreDown = px.counts.storeDown.Load()
	h := &px.hooks
	rep.Events.Webhooks = h.forwarded.Load() + h.resets.Load()
	rep.Events.Resets, rep.Events.Drops, rep.Events.Delays = h.resets.Load(), h.drops.Load(), h.delays.Load()
	rep.Events.Conflicts = h.conflicts.Load()
	resent := rep.Answers.Resent
	rep.Answers, rep.Events.Answers = px.answers.report(), px.hookAnswers.report()
	rep.Answers.Resent = resent
	if demo != nil {
		rep.Existing = demo.API.Existing.Load()
		if demo.Stream != nil {
			rep.Events.StreamEntries, rep.Events.StreamClaimed = demo.Stream.Published.Load(), demo.Stream.Claimed.Load()
		}
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// ownRedis starts the storm's own redis-server if the Options ask for
// one, and points the in-process demo's records or event stream at it.
func ownRedis(ctx context.Context, o *Options) (*redisserver.Server, error) {
	if o.Target != "" && o.Records != "" {
		return nil, errors.New("-records is for the in-process demo: a -target keeps its records where it was told to")
	}
	chaos := o.RedisRestartAfter > 0 || o.RedisFlushEvery > 0
	if !o.OwnRedis && !o.EventsOwnRedis && !chaos {
		return nil, nil
	}
	// The records go there unless only the events were asked to.
	records := o.OwnRedis || !o.EventsOwnRedis
	switch {
	case o.Target != "":
		return nil, errors.New("a Redis of the storm's own (-own-redis, -events-own-redis, -redis-restart-after, -redis-flush-every) is for the in-process demo: not with -target")
	case records && o.Records != "":
		return nil, errors.New("-records names a Redis of your own: the storm restarts or empties only a redis-server it started (drop -records)")
	}
	rs, err := redisserver.Start(ctx)
	if err != nil {
		return nil, err
	}
	if records {
		o.Records = rs.URL()
	}
	if o.EventsOwnRedis {
		o.events = rs.URL()
	}
	return rs, nil
}

// sent is what sendAll did.
type sent struct {
	attempts, replays int64
	unsettled         []int // the requests whose client gave up
}

// sendAll sends requests 0 to n-1 with send, o.Concurrency at a time,
// drawing a progress bar of what.
func sendAll(ctx context.Context, o Options, what string, n int, send func(i int) (idemclient.Result, string)) sent {
	var attempts, replays, done atomic.Int64
	var mu sync.Mutex
	var unsettled []int
	stopBar := progress(o.Progress, &done, n, what)
	defer stopBar()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range o.Concurrency {
		wg.Go(func() {
			for i := range jobs {
				res, failure := send(i)
				attempts.Add(int64(res.Attempts))
				if res.Replayed {
					replays.Add(1)
				}
				if failure != "" {
					mu.Lock()
					unsettled = append(unsettled, i)
					mu.Unlock()
				}
				done.Add(1)
			}
		})
	}
	for i := range n {
		select {
		case jobs <- i:
		case <-ctx.Done():
		}
	}
	close(jobs)
	wg.Wait()
	return sent{attempts: attempts.Load(), replays: replays.Load(), unsettled: unsettled}
}

// check holds every charge sent against the rows found for it: exactly
// one, with its amount. Totals alone would let a duplicate and a loss
// cancel out.
func (rep *Report) check(sent []charge, rows []chargeRow) {
	byDesc := make(map[string][]chargeRow, len(rows))
	for _, r := range rows {
		byDesc[r.Description] = append(byDesc[r.Description], r)
		rep.Found.Charges++
		rep.Found.Charged += r.Amount
	}
	for _, c := range sent {
		found := byDesc[c.description]
		delete(byDesc, c.description)
		switch {
		case len(found) == 0:
			rep.Lost++
		case len(found) > 1:
			rep.Duplicates += int64(len(found) - 1)
		}
		for _, r := range found {
			if r.Amount != c.amount {
				rep.Mismatched++
			}
		}
	}
	for _, extra := range byDesc {
		rep.Mismatched += int64(len(extra))
	}
}

// post sends one charge. It returns why the server did not confirm it with
// a 201, or "" if it did. With seen, as postJSON.
func post(ctx context.Context, c *http.Client, base, auth string, ch charge, seen *answers) (idemclient.Result, string) {
	res, failure, _ := postJSON(ctx, c, base+"/v1/charges", auth, ch.key, ch.body, seen)
	return res, failure
}

// answerKey names the key of a request to path in answers.
func answerKey(path, key string) string { return path + " " + key }

// postJSON sends body to u with the Idempotency-Key key. It returns why
// the server did not answer 201, or "" and the answer's body if it did.
// With seen (a request straight at the server, which the proxy does not
// see), the answer is held against the key's first.
func postJSON(ctx context.Context, c *http.Client, u, auth, key string, body []byte, seen *answers) (idemclient.Result, string, []byte) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return idemclient.Result{}, err.Error(), nil
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", auth)
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.Do(req)
	if err != nil {
		res := idemclient.Result{Attempts: 1}
		if e := (*idemclient.Error)(nil); errors.As(err, &e) {
			res.Attempts = e.Attempts
		}
		return res, err.Error(), nil
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	res, _ := idemclient.Outcome(resp)
	if seen != nil {
		seen.see(answerKey(req.URL.Path, key), resp.StatusCode, resp.Header.Get("Location"), answer)
	}
	if resp.StatusCode != http.StatusCreated {
		return res, fmt.Sprintf("%s: %s", resp.Status, answer), nil
	}
	return res, "", answer
}

// chargeRow is a charge as GET /v1/charges lists it.
type chargeRow struct {
	ID          string `json:"id"`
	Amount      int64  `json:"amount"`
	Description string `json:"description"`
}

// fetchCharges lists every charge of the account, page by page.
func fetchCharges(ctx context.Context, base, auth string) ([]chargeRow, error) {
	var all []chargeRow
	after := ""
	for {
		u := base + "/v1/charges?limit=100"
		if after != "" {
			u += "&starting_after=" + url.QueryEscape(after)
		}
		var page struct {
			Data    []chargeRow `json:"data"`
			HasMore bool        `json:"has_more"`
		}
		if err := getJSON(ctx, u, auth, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Data...)
		if !page.HasMore || len(page.Data) == 0 {
			return all, nil
		}
		after = page.Data[len(page.Data)-1].ID
	}
}

// providerCounts is what GET /debug/provider reports for the account.
type providerCounts struct {
	Calls          int64 `json:"calls"`
	Authorizations int64 `json:"authorizations"`
	Events         int64 `json:"events"`
	Deliveries     int64 `json:"deliveries"`
}

func fetchProviderCounts(ctx context.Context, base, auth string) (providerCounts, error) {
	var c providerCounts
	return c, getJSON(ctx, base+"/debug/provider", auth, &c)
}

func getJSON(ctx context.Context, u, auth string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", req.URL.Path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// startServer runs the demo in this process on a loopback port, on clock
// if not nil.
func startServer(ctx context.Context, o Options, clock *shiftedClock) (string, *app.App, func(), error) {
	db := o.DB
	var dir string
	if db == "" {
		var err error
		if dir, err = os.MkdirTemp("", "storm-"); err != nil {
			return "", nil, nil, err
		}
		db = filepath.Join(dir, "payments.db")
	}
	cfg := app.DefaultConfig()
	cfg.Addr, cfg.Framework, cfg.DB = "127.0.0.1:0", o.Framework, db
	cfg.ProviderLatency, cfg.ProviderFailureRate = o.ProviderLatency, o.ProviderFailureRate
	cfg.Records, cfg.Events = o.Records, o.events
	switch {
	case o.Lease > 0:
		cfg.Lease = o.Lease
	case o.Records != "" || o.events != "":
		cfg.Lease = RedisLease
	}
	// The provider settles at once, and sends 16 webhooks at once.
	cfg.SettleEvery, cfg.WebhookWorkers = 100*time.Millisecond, 16
	if clock != nil {
		cfg.Now = clock.Now
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := app.Open(ctx, cfg, quiet)
	if err != nil {
		if dir != "" {
			os.RemoveAll(dir)
		}
		return "", nil, nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		a.Close()
		return "", nil, nil, err
	}
	served := make(chan error, 1)
	go func() { served <- a.Server.Serve(ln) }()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a.Server.Shutdown(sctx)
		<-served
		a.Close()
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	return "http://" + ln.Addr().String(), a, stop, nil
}

// chaosResult is what chaos did to the storm's redis-server.
type chaosResult struct {
	restarts int
	downtime time.Duration
	flushes  int
	err      error
}

// chaos restarts and empties rs as the Options ask, while the charges and
// refunds are sent and settled: until sending is closed. Without rs it does
// nothing. A restart or a flush that never came before then is an error:
// the run would prove nothing about it.
func chaos(ctx context.Context, o Options, rs *redisserver.Server, sending <-chan struct{}) (res chaosResult) {
	if rs == nil {
		return res
	}
	var restart, flush <-chan time.Time
	if o.RedisRestartAfter > 0 {
		t := time.NewTimer(o.RedisRestartAfter)
		defer t.Stop()
		restart = t.C
	}
	if o.RedisFlushEvery > 0 {
		t := time.NewTicker(o.RedisFlushEvery)
		defer t.Stop()
		flush = t.C
	}
	for {
		select {
		case <-restart:
			restart = nil
			began := time.Now()
			rs.Kill()
			select {
			case <-time.After(o.RedisDown):
			case <-ctx.Done():
				res.err = ctx.Err()
				return res
			}
			if res.err = rs.Restart(ctx); res.err != nil {
				res.err = fmt.Errorf("restart redis-server: %w", res.err)
				return res
			}
			res.restarts++
			res.downtime = time.Since(began)
		case <-flush:
			if err := rs.FlushAll(ctx); err != nil {
				res.err = fmt.Errorf("FLUSHALL: %w", err)
				return res
			}
			res.flushes++
		case <-sending:
			switch {
			case restart != nil:
				res.err = fmt.Errorf("every charge and refund was settled before the Redis restart due at %s: lower -redis-restart-after or raise -n", o.RedisRestartAfter)
			case o.RedisFlushEvery > 0 && res.flushes == 0:
				res.err = fmt.Errorf("every charge and refund was settled before the first FLUSHALL due at %s: lower -redis-flush-every or raise -n", o.RedisFlushEvery)
			}
			return res
		case <-ctx.Done():
			res.err = ctx.Err()
			return res
		}
	}
}

// serve runs h on a loopback port.
func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ErrorLog: nil}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }, nil
}

// progress draws a bar on w until the returned function is called.
func progress(w io.Writer, done *atomic.Int64, total int, what string) func() {
	if w == nil {
		return func() {}
	}
	stop := make(chan struct{})
	finished := make(chan struct{})
	draw := func() {
		n := int(done.Load())
		const width = 40
		filled := width * n / max(total, 1)
		fmt.Fprintf(w, "\r[%s%s] %d/%d %s", strings.Repeat("#", filled), strings.Repeat(".", width-filled), n, total, what)
	}
	go func() {
		defer close(finished)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				draw()
				fmt.Fprintln(w)
				return
			case <-t.C:
				draw()
			}
		}
	}()
	return func() { close(stop); <-finished }
}

var errFailed = errors.New("storm found duplicated, lost or mismatched charges or refunds, provider authorizations that differ from the charges, or settlement events applied twice, never, or wrongly")
