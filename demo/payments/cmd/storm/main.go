// Command storm proves that the payments demo never double-charges, and
// applies each settlement event of its payment provider exactly once: it
// starts the demo (or targets a running one), puts a fault-injecting proxy
// on loopback in front of it that resets connections, drops responses after
// the server processed the request, and holds requests back until the
// client has retried them, then sends both copies together; and it sends
// charges, then refunds, through a retrying client that reuses each one's
// key. The provider's webhooks go through the same proxy. It then looks up
// every charge and refund, the payment provider's authorizations and the
// ledger's settlement entries, and exits non-zero unless each charge was
// written exactly once with its amount and authorized exactly once, and
// each charge and refund settled by exactly one entry. The in-process demo
// can keep its idempotency records in Redis (-records), or in a
// redis-server the storm starts and then kills and restarts
// (-redis-restart-after) or empties (-redis-flush-every) while the charges
// are sent; its event stream can go to that redis-server too
// (-events-own-redis).
//
//	go run ./demo/payments/cmd/storm                    # 2,000 charges, 400 refunds, 30% faults
//	go run ./demo/payments/cmd/storm -n 500 -c 20 -framework fiber
//	go run ./demo/payments/cmd/storm -target http://127.0.0.1:8080
//	go run ./demo/payments/cmd/storm -records redis://127.0.0.1:6379/0  # records in Redis
//	go run ./demo/payments/cmd/storm -n 300 -redis-restart-after 2s     # its own Redis, killed and restarted mid-storm
//	go run ./demo/payments/cmd/storm -n 300 -redis-flush-every 200ms    # its own Redis, emptied again and again
//	go run ./demo/payments/cmd/storm -events-own-redis -redis-restart-after 2s # events on a stream in its own Redis, restarted
//	go run ./demo/payments/cmd/storm -events-own-redis -redeliver-after-ttl    # every event again once every record expired
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/server"
)

func main() {
	// The storm kills and empties its Redis on purpose: the Redis client
	// library's line for each failed dial would bury the report. The
	// report counts what the outage did.
	app.LogRedisTo(slog.New(slog.DiscardHandler))
	o := DefaultOptions()
	flag.StringVar(&o.Target, "target", o.Target, "base URL of a running demo (loopback only); empty starts one in-process")
	flag.StringVar(&o.AdminTarget, "admin-target", o.AdminTarget, "base URL serving GET /debug/provider for -target, when that demo runs with -admin-addr (loopback only); default -target")
	flag.StringVar(&o.Framework, "framework", o.Framework, "framework of the in-process demo: "+strings.Join(server.Frameworks, "|"))
	flag.StringVar(&o.DB, "db", o.DB, "database of the in-process demo (default: a fresh SQLite file)")
	flag.IntVar(&o.Charges, "n", o.Charges, "number of charges")
	flag.IntVar(&o.Concurrency, "c", o.Concurrency, "concurrent clients")
	flag.Float64Var(&o.Faults.Reset, "reset-rate", o.Faults.Reset, "share of requests whose connection is reset before reaching the server")
	flag.Float64Var(&o.Faults.Drop, "drop-rate", o.Faults.Drop, "share of requests whose response is dropped after the server processed them")
	flag.Float64Var(&o.Faults.Delay, "delay-rate", o.Faults.Delay, "share of requests held back until the client retries them, then sent beside the retry")
	flag.DurationVar(&o.Faults.DelayFor, "delay", o.Faults.DelayFor, "longest hold of a delayed request when no retry comes (above -attempt-timeout)")
	flag.DurationVar(&o.AttemptTimeout, "attempt-timeout", o.AttemptTimeout, "client timeout per attempt")
	flag.DurationVar(&o.Timeout, "timeout", o.Timeout, "bound on the whole run")
	flag.DurationVar(&o.ProviderLatency, "provider-latency", o.ProviderLatency, "in-process demo: simulated provider latency")
	flag.Float64Var(&o.ProviderFailureRate, "provider-failure-rate", o.ProviderFailureRate, "in-process demo: transient provider failure rate")
	flag.StringVar(&o.Records, "records", o.Records, "in-process demo: redis:// URL where it keeps its idempotency records (default: its database)")
	flag.BoolVar(&o.OwnRedis, "own-redis", o.OwnRedis, "in-process demo: keep its records in a redis-server the storm starts (appendonly, fsync every second) and stops")
	flag.DurationVar(&o.RedisRestartAfter, "redis-restart-after", o.RedisRestartAfter, "with the storm's own redis-server: kill it (SIGKILL) this long into the run and restart it on its files")
	flag.DurationVar(&o.RedisDown, "redis-down", o.RedisDown, "how long the killed redis-server stays down")
	flag.DurationVar(&o.RedisFlushEvery, "redis-flush-every", o.RedisFlushEvery, "with the storm's own redis-server: delete every record (FLUSHALL) this often while charges are sent")
	flag.DurationVar(&o.Lease, "lease", o.Lease, "in-process demo: lease of a running request (default: the demo's 30s, or 2s with records or events in Redis)")
	flag.IntVar(&o.Refunds, "refunds", o.Refunds, "number of the charges then refunded, half their amount each")
	flag.BoolVar(&o.EventsOwnRedis, "events-own-redis", o.EventsOwnRedis, "in-process demo: its event stream (-events) in a redis-server the storm starts, which -redis-restart-after restarts; the records stay in its database unless -own-redis")
	flag.DurationVar(&o.SettleTimeout, "settle-timeout", o.SettleTimeout, "how long to wait, after the refunds, for the provider's settlement events to settle every charge and refund")
	flag.BoolVar(&o.RedeliverAfterTTL, "redeliver-after-ttl", o.RedeliverAfterTTL, "in-process demo: once everything has settled, move its clock past its TTL (every record expired) and deliver every settlement event again, by webhook and to its stream's consumer group made anew from 0")
	flag.Parse()
	o.Progress = os.Stderr

	for _, target := range []string{o.Target, o.AdminTarget} {
		if err := checkTarget(target); err != nil {
			fmt.Fprintln(os.Stderr, "storm:", err)
			os.Exit(2)
		}
	}
	if o.Lease != 0 {
		if err := app.CheckLease(o.Lease); err != nil {
			fmt.Fprintln(os.Stderr, "storm:", err)
			os.Exit(2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := Run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(1)
	}
	rep.Print(os.Stdout)
	if !rep.OK() {
		for _, f := range rep.Failures() {
			fmt.Fprintln(os.Stderr, "storm:", f)
		}
		fmt.Fprintln(os.Stderr, "storm:", errFailed)
		os.Exit(1)
	}
}
