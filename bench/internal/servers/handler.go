// Package servers builds the servers the benchmark measures: one endpoint,
// POST /orders, on net/http, Gin, Echo v4 and v5 and Fiber v2 and v3, bare
// or behind idemkit (memory or GORM SQLite store), a bare handler that also
// INSERTs one row through GORM (the SQLite baseline), and Fiber v2 and v3
// behind their own idempotency middleware; on net/http, the stores a fleet
// runs on (the GORM store on PostgreSQL, the Redis store) and their
// one-statement baselines (see fleet.go). It also calls them in process,
// without a network, and fills their stores for the scale measurements.
package servers

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	gormstore "github.com/idemkit/idemkit/stores/gorm"
)

// Path is the endpoint every server serves.
const Path = "/orders"

// RequestBody is the body every request sends: about 100 bytes of JSON.
var RequestBody = []byte(`{"item":"paperback-0042","quantity":3,"customer":"cus_8f14e45fceea167a","note":"leave it at the door"}`)

// order is the decoded request.
type order struct {
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
	Customer string `json:"customer"`
	Note     string `json:"note"`
}

// created is the response: about 150 bytes of JSON.
type created struct {
	ID       string `json:"id"`
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
	Customer string `json:"customer"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
	Created  int64  `json:"created"`
}

// orders is what the handlers share: an id counter and, for the
// one-statement baselines, the database or Redis they write to.
type orders struct {
	seq atomic.Int64
	db  *gorm.DB // nil: no INSERT
	// insert is the INSERT on db, into the baseline's own table.
	insert string
	// tx: the INSERT runs in the request's transaction (gormstore.Tx),
	// which the store commits with the stored response.
	tx  bool
	rdb redis.UniversalClient // nil: no SET NX
	// prefix begins the baseline's Redis keys; ttl is their expiry.
	prefix string
	ttl    time.Duration
}

// ordersColumns are the columns the baselines' INSERT writes.
const ordersColumns = "(item, quantity, customer, note, created) VALUES (?, ?, ?, ?, ?)"

// OrdersTable is the SQLite baseline's table.
const OrdersTable = `CREATE TABLE IF NOT EXISTS orders (
	id INTEGER PRIMARY KEY, item TEXT NOT NULL, quantity INTEGER NOT NULL,
	customer TEXT NOT NULL, note TEXT NOT NULL, created INTEGER NOT NULL)`

// errKeyTaken is a baseline's SET NX finding its key: every order ID is
// new, so it means two servers share a prefix.
var errKeyTaken = errors.New("servers: SET NX found the order's key taken")

// create is the work of the endpoint once the framework decoded o: one
// INSERT or one SET NX for the baselines, then the response.
func (s *orders) create(ctx context.Context, o *order) (created, error) {
	now := time.Now().Unix()
	id := "ord_" + strconv.FormatInt(1e12+s.seq.Add(1), 10)
	if s.tx {
		tx, err := gormstore.Tx(ctx, s.db)
		if err != nil {
			return created{}, err
		}
		if err := tx.Exec(s.insert, o.Item, o.Quantity, o.Customer, o.Note, now).Error; err != nil {
			return created{}, err
		}
	} else if s.db != nil {
		if err := s.db.WithContext(ctx).Exec(s.insert, o.Item, o.Quantity, o.Customer, o.Note, now).Error; err != nil {
			return created{}, err
		}
	}
	if s.rdb != nil {
		// About a record's size: the order as the INSERT stores it.
		v := o.Customer + " " + strconv.Itoa(o.Quantity) + " " + o.Item + " " + o.Note
		ok, err := s.rdb.SetNX(ctx, s.prefix+id, v, s.ttl).Result()
		if err != nil {
			return created{}, err
		}
		if !ok {
			return created{}, errKeyTaken
		}
	}
	return created{
		ID:       id,
		Item:     o.Item,
		Quantity: o.Quantity,
		Customer: o.Customer,
		Amount:   1999 * o.Quantity,
		Currency: "usd",
		Created:  now,
	}, nil
}
