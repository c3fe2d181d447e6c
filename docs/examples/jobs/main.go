// Command jobs applies payments that come as queued messages and as
// signed webhooks, each once however often it is delivered, its row
// committed in the same transaction as its idempotency record.
package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
	"gorm.io/gorm"
)

// Payment is a business row: one per message applied.
type Payment struct {
	ID      uint   `gorm:"primaryKey"`
	Message string `gorm:"index"`
	Order   int
	Amount  int64
}

// Message is what a queue delivers: an id, the same on every delivery of
// the message, and its payload.
type Message struct {
	ID      string
	Payload string
}

// Consumer applies the messages of a queue.
type Consumer struct {
	engine *idem.Engine
	db     *gorm.DB
	// flaky and redeliver are the failures this program shows: a
	// message whose first run fails, and one delivered again while it
	// runs.
	flaky, redeliver map[string]bool
}

// Apply applies m once, whatever its deliveries, and reports whether the
// queue may forget it (acknowledge it) or must deliver it again later.
func (c *Consumer) Apply(ctx context.Context, m Message) (outcome string, ack bool) {
	ctx, done := gormstore.WithTxSlot(ctx)
	defer done()
	job := idem.Job{Key: m.ID, Name: "pay", Payload: []byte(m.Payload)}
	result, err := c.engine.Do(ctx, job, func(ctx context.Context) ([]byte, error) {
		return c.pay(ctx, m)
	})
	var refused *idem.PermanentError
	switch {
	case err == nil:
		return string(result), true
	case errors.As(err, &refused), errors.Is(err, idem.ErrKeyReused):
		return "refused for good: " + err.Error(), true
	case errors.Is(err, idem.ErrInProgress):
		return "being applied by another delivery: not acknowledged", false
	case errors.Is(err, idem.ErrNotRecorded):
		// Applied, but nothing guards the id now: delivering it again would
		// apply it again. Acknowledge, and alert.
		return "applied, not recorded: " + err.Error(), true
	}
	return "failed, to be delivered again: " + err.Error(), false
}

// pay is the work: it writes the payment in the transaction that commits
// with the message's record.
func (c *Consumer) pay(ctx context.Context, m Message) ([]byte, error) {
	var p struct {
		Order  int
		Amount int64
	}
	if err := json.Unmarshal([]byte(m.Payload), &p); err != nil || p.Order < 1 || p.Amount < 1 {
		return nil, idem.Permanent(errors.New("no such order"))
	}
	if c.flaky[m.ID] {
		delete(c.flaky, m.ID)
		return nil, errors.New("the payment gateway timed out")
	}
	if c.redeliver[m.ID] {
		delete(c.redeliver, m.ID)
		outcome, _ := c.Apply(context.Background(), m)
		fmt.Printf("%s: meanwhile, a redelivery: %s\n", m.ID, outcome)
	}
	tx, err := gormstore.Tx(ctx, c.db)
	if err != nil {
		return nil, err
	}
	row := Payment{Message: m.ID, Order: p.Order, Amount: p.Amount}
	if err := tx.Create(&row).Error; err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "payment %d: order %d, %d cents", row.ID, p.Order, p.Amount), nil
}

// webhooks receives payments as webhooks signed with secret, as the
// Standard Webhooks specification says: the key of each is its
// webhook-id, and a webhook whose signature does not verify is refused
// before idemkit sees it, so that it records nothing.
func webhooks(engine *idem.Engine, db *gorm.DB, secret []byte) http.Handler {
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct {
			Order  int
			Amount int64
		}
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &p) != nil || p.Order < 1 || p.Amount < 1 {
			http.Error(w, "not a payment", http.StatusUnprocessableEntity)
			return
		}
		tx, err := gormstore.Tx(r.Context(), db)
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		row := Payment{Message: r.Header.Get("webhook-id"), Order: p.Order, Amount: p.Amount}
		if err := tx.Create(&row).Error; err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "payment %d: order %d, %d cents", row.ID, p.Order, p.Amount)
	})
	guarded := idemhttp.Middleware(engine,
		idemhttp.WithKey(func(r *http.Request) (string, bool) {
			id := r.Header.Get("webhook-id")
			return id, id != ""
		}),
		idemhttp.WithScope(func(*http.Request) string { return "webhooks" }),
	)(pay)
	return verified(secret, gormstore.TxMiddleware(guarded))
}

// verified lets through the webhooks signed with secret in the last five
// minutes, and refuses the others with 400.
func verified(secret []byte, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		id, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
		at, tsErr := strconv.ParseInt(ts, 10, 64)
		want := "v1," + base64.StdEncoding.EncodeToString(sign(secret, id, ts, body))
		age := time.Since(time.Unix(at, 0))
		if err != nil || tsErr != nil || age > 5*time.Minute || age < -5*time.Minute ||
			!hmac.Equal([]byte(r.Header.Get("webhook-signature")), []byte(want)) {
			http.Error(w, "webhook signature invalid", http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// sign is the HMAC-SHA256 of "id.timestamp.body" under secret.
func sign(secret []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	fmt.Fprintf(m, "%s.%s.", id, ts)
	m.Write(body)
	return m.Sum(nil)
}

func main() {
	dir, err := os.MkdirTemp("", "jobs-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlitedb.Open(filepath.Join(dir, "payments.db"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := gormstore.New(db)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	ctx := context.Background()
	if err := store.AutoMigrate(ctx); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Payment{}); err != nil {
		log.Fatal(err)
	}
	engine := idem.New(idem.Config{Store: store})
	consume(ctx, engine, db)
	receive(engine, db)

	var n, total int64
	db.Model(&Payment{}).Count(&n)
	db.Model(&Payment{}).Select("COALESCE(SUM(amount), 0)").Scan(&total)
	fmt.Printf("%d payments, %d cents in all\n", n, total)
}

// consume delivers a queue's messages to a Consumer at least once: a
// message it does not acknowledge goes to the back of the queue.
func consume(ctx context.Context, engine *idem.Engine, db *gorm.DB) {
	c := &Consumer{engine: engine, db: db,
		flaky: map[string]bool{"msg_2": true}, redeliver: map[string]bool{"msg_3": true}}
	queue := []Message{
		{"msg_1", `{"order":1,"amount":1999}`},
		{"msg_1", `{"order":1,"amount":1999}`},
		{"msg_2", `{"order":2,"amount":500}`},
		{"msg_3", `{"order":3,"amount":700}`},
		{"msg_1", `{"order":1,"amount":2000}`},
		{"msg_4", `{"order":0,"amount":100}`},
		{"msg_4", `{"order":0,"amount":100}`},
	}
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		outcome, ack := c.Apply(ctx, m)
		fmt.Printf("%s: %s\n", m.ID, outcome)
		if !ack {
			queue = append(queue, m)
		}
	}
}

// receive sends webhooks to the handler: one signed twice, one with a
// bad signature and one signed too long ago.
func receive(engine *idem.Engine, db *gorm.DB) {
	secret := []byte("a secret of 24 or more bytes")
	srv := httptest.NewServer(webhooks(engine, db, secret))
	defer srv.Close()
	body := []byte(`{"order":5,"amount":900}`)
	for _, d := range []struct {
		id       string
		key      []byte
		signedAt time.Time
	}{
		{"msg_5", secret, time.Now()},
		{"msg_5", secret, time.Now()},
		{"msg_6", []byte("another secret, not the endpoint's"), time.Now()},
		{"msg_7", secret, time.Now().Add(-time.Hour)},
	} {
		ts := strconv.FormatInt(d.signedAt.Unix(), 10)
		req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
		req.Header.Set("webhook-id", d.id)
		req.Header.Set("webhook-timestamp", ts)
		req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(sign(d.key, d.id, ts, body)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("webhook %s: %d %s (replayed: %v)\n", d.id, resp.StatusCode, bytes.TrimSpace(answer), resp.Header.Get("Idempotent-Replayed") == "true")
	}
}
