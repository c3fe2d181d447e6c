package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idemkit/core/idemclient"
	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/payments"
	"github.com/idemkit/idemkit/demo/payments/internal/redisserver"
	"github.com/idemkit/idemkit/demo/payments/internal/testdb"
)

// instance is a demo process of a fleet sharing a database and an event
// stream.
type instance struct {
	cmd  *exec.Cmd
	base string
	logs *logBuffer
	done chan struct{}
}

// startInstance runs the demo's command with args on a free port and waits
// until it serves; the test ends it.
func startInstance(t *testing.T, args ...string) *instance {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	in := &instance{base: "http://" + addr, logs: &logBuffer{}, done: make(chan struct{})}
	in.cmd = exec.Command(binary(t), append([]string{"-addr", addr}, args...)...)
	in.cmd.Dir, in.cmd.Stderr = t.TempDir(), in.logs
	if err := in.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { in.cmd.Wait(); close(in.done) }()
	t.Cleanup(func() {
		in.cmd.Process.Kill()
		<-in.done
		if t.Failed() {
			t.Logf("log of the instance on %s:\n%s", addr, in.logs.text())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(in.base + "/healthz"); err == nil {
			resp.Body.Close()
			return in
		}
		select {
		case <-in.done:
			t.Fatalf("the instance exited at start:\n%s", in.logs.text())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the instance did not come up:\n%s", in.logs.text())
		}
	}
}

// kill ends the instance with SIGKILL, as a crash would.
func (in *instance) kill() {
	in.cmd.Process.Signal(syscall.SIGKILL)
	<-in.done
}

// fleetLedger is the test's own view of the fleet's database.
type fleetLedger struct{ db *gorm.DB }

func openLedger(t *testing.T, dsn string) fleetLedger {
	t.Helper()
	quiet := &gorm.Config{Logger: logger.Discard}
	var db *gorm.DB
	var err error
	if strings.HasPrefix(dsn, "postgres://") {
		db, err = gorm.Open(postgres.Open(dsn), quiet)
	} else {
		db, err = sqlitedb.Open(dsn, quiet)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := db.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return fleetLedger{db}
}

// applied returns which of the events have a ledger entry.
func (l fleetLedger) applied(t *testing.T, events []string) []string {
	t.Helper()
	if len(events) == 0 {
		return nil
	}
	var found []string
	if err := l.db.Model(&payments.Settlement{}).Where("event IN ?", events).Distinct().Pluck("event", &found).Error; err != nil {
		t.Fatal(err)
	}
	return found
}

// pendingWith returns the events of the entries pending with the consumer
// of the process pid, and that consumer's name.
func pendingWith(ctx context.Context, rc *redis.Client, pid int) (consumer string, events []string, err error) {
	consumers, err := rc.XInfoConsumers(ctx, app.EventStream, app.EventGroup).Result()
	if err != nil {
		return "", nil, err
	}
	for _, c := range consumers {
		if strings.Contains(c.Name, "-"+strconv.Itoa(pid)+"-") {
			consumer = c.Name
		}
	}
	if consumer == "" {
		return "", nil, nil
	}
	entries, err := rc.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: app.EventStream, Group: app.EventGroup,
		Start: "-", End: "+", Count: 1000, Consumer: consumer}).Result()
	if err != nil || len(entries) == 0 {
		return consumer, nil, err
	}
	for _, e := range entries {
		msgs, err := rc.XRange(ctx, app.EventStream, e.ID, e.ID).Result()
		if err != nil {
			return consumer, nil, err
		}
		for _, m := range msgs {
			if id, ok := m.Values["id"].(string); ok {
				events = append(events, id)
			}
		}
	}
	return consumer, events, nil
}

// TestEventConsumerKilledMidBatch runs a fleet of demo processes sharing
// a database and an event stream, with no webhooks: the stream alone
// carries the provider's events. One consumer is killed with SIGKILL
// while it applies a batch, after it applied some of its entries and
// before it acknowledged them; then Redis is killed and restarted on its
// append-only file; more charges and refunds follow. Every charge and
// refund must end settled by exactly one ledger entry, and every entry of
// the stream acknowledged, the dead consumer's claimed by the others.
func TestEventConsumerKilledMidBatch(t *testing.T) {
	for name, fleet := range map[string]struct {
		dsn func(testing.TB) string
		// recordsInRedis: the idempotency records are kept in the
		// Redis of the stream, not in the database. A SQLite store
		// serves one process, so a fleet on one SQLite file keeps its
		// records in Redis; the rows stay in the file, and each event's
		// settlement is kept single by its unique key there.
		recordsInRedis bool
	}{
		"sqlite":   {dsn: func(tb testing.TB) string { return filepath.Join(t.TempDir(), "fleet.db") }, recordsInRedis: true},
		"postgres": {dsn: testdb.Postgres},
	} {
		t.Run(name, func(t *testing.T) {
			db := fleet.dsn(t)
			if db == "" {
				return // PostgreSQL under -short
			}
			crashConsumer(t, db, fleet.recordsInRedis)
		})
	}
}

func crashConsumer(t *testing.T, dsn string, recordsInRedis bool) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("%v; `make test` installs it through scripts/redis-servers.sh", redisserver.ErrNotInstalled)
	}
	ctx := t.Context()
	rs, err := redisserver.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Stop()
	rc := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	defer rc.Close()
	// The lease is the time after which the others claim the entries a
	// consumer left pending.
	common := []string{"-db", dsn, "-events", rs.URL(), "-webhooks=false", "-lease", "1s", "-provider-latency", "1ms"}
	if recordsInRedis {
		common = append(common, "-records", rs.URL())
	}
	producer := startInstance(t, append(common, "-settle-every", "100ms")...)
	victim := startInstance(t, append(common, "-settle-every", "0")...)
	ledger := openLedger(t, dsn)
	acct := newAccount()

	// Charges and refunds, eight at a time, while the provider puts their
	// events on the stream and the two instances consume it.
	var wg sync.WaitGroup
	wg.Go(func() { chargeAndRefund(t, producer.base, acct, 0, 300) })

	// The victim dies once some entry it holds pending has been applied:
	// in the middle of a batch, which it acknowledges only at its end. It
	// is stopped (SIGSTOP) while the test looks, so that what the test
	// sees is what it holds when it dies.
	var consumer string
	var heldAtKill, appliedAtKill []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		victim.cmd.Process.Signal(syscall.SIGSTOP)
		name, held, err := pendingWith(ctx, rc, victim.cmd.Process.Pid)
		if err == nil && len(held) > 0 {
			if done := ledger.applied(t, held); len(done) > 0 {
				victim.kill()
				consumer, heldAtKill, appliedAtKill = name, held, done
				break
			}
		}
		victim.cmd.Process.Signal(syscall.SIGCONT)
		if time.Now().After(deadline) {
			t.Fatal("in a minute, the victim never held a pending entry already applied: no batch to kill it in")
		}
	}
	if len(appliedAtKill) == 0 || len(heldAtKill) == 0 {
		t.Fatalf("killed with %d entries pending, %d of them applied: want an applied, unacknowledged entry", len(heldAtKill), len(appliedAtKill))
	}
	t.Logf("killed consumer %s with %d entries pending, %d of them already applied", consumer, len(heldAtKill), len(appliedAtKill))

	// Redis dies and comes back on its append-only file; a new consumer
	// takes the victim's place; more charges and refunds follow.
	rs.Kill() // returns once the process has exited
	if err := rs.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	startInstance(t, append(common, "-settle-every", "0")...)
	wg.Wait()
	chargeAndRefund(t, producer.base, acct, 300, 100)

	// Every charge and refund settled once; every entry acknowledged.
	var b payments.Balance
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if b, err = payments.GetBalance(ctx, ledger.db, acct); err != nil {
			t.Fatal(err)
		}
		if b.Settlements >= b.Charges+b.Refunds || time.Now().After(deadline) {
			break
		}
	}
	var twice []struct {
		Object string
		N      int
	}
	ledger.db.Model(&payments.Settlement{}).Select("object, COUNT(*) AS n").Group("object").Having("COUNT(*) > 1").Scan(&twice)
	if b.Charges != 400 || b.Refunds != 200 || b.Settlements != b.Charges+b.Refunds ||
		b.SettledCharged != b.Charged || b.SettledRefunded != b.Refunded || len(twice) > 0 {
		t.Fatalf("balance %+v, applied twice %v: want 400 charges and 200 refunds, each settled by one entry", b, twice)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		p, err := rc.XPending(ctx, app.EventStream, app.EventGroup).Result()
		if err == nil && p.Count == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entries still pending a minute after the last charge: %+v, %v", p, err)
		}
	}
	_, left, _ := pendingWith(ctx, rc, victim.cmd.Process.Pid)
	if len(left) > 0 {
		t.Fatalf("the dead consumer still holds %d entries: nobody claimed them", len(left))
	}
}

// chargeAndRefund makes n charges of 1000 for account through base,
// numbered from first, eight at a time, and refunds half of every other
// one, each with a key of its own that retries reuse.
func chargeAndRefund(t *testing.T, base, account string, first, n int) {
	client := idemclient.NewClient(idemclient.Config{MaxAttempts: 20, Budget: time.Minute})
	post := func(path, key, body string) (string, error) {
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+account)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		var made struct{ ID string }
		json.NewDecoder(resp.Body).Decode(&made)
		if resp.StatusCode != http.StatusCreated {
			return "", fmt.Errorf("%s", resp.Status)
		}
		return made.ID, nil
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range jobs {
				id, err := post("/v1/charges", fmt.Sprintf(`"c-%d"`, i), `{"amount":1000,"currency":"usd","customer":"cus_1"}`)
				if err != nil {
					t.Errorf("charge %d: %v", i, err)
					continue
				}
				if i%2 == 0 {
					if _, err := post("/v1/refunds", fmt.Sprintf(`"r-%d"`, i), fmt.Sprintf(`{"charge":%q,"amount":500}`, id)); err != nil {
						t.Errorf("refund %d: %v", i, err)
					}
				}
			}
		})
	}
	for i := first; i < first+n; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
}
