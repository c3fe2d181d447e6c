// Command durable is the tutorial's endpoint grown up: records in a
// database (SQLite, or PostgreSQL with $DATABASE_URL), keys scoped per
// account, and each order committed together with its stored response.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idemkit/adapters/gin"
	idem "github.com/idemkit/idemkit/core"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

// Order is a business row, written in the same transaction as the record.
type Order struct {
	ID       uint   `gorm:"primaryKey" json:"id"`
	Account  string `gorm:"index" json:"-"`
	Item     string `json:"item"`
	Quantity int    `json:"quantity"`
}

// openDB opens the SQLite file orders.db, or the PostgreSQL database
// named by $DATABASE_URL.
func openDB() (*gorm.DB, error) {
	dsn := os.Getenv("DATABASE_URL")
	if dsn == "" {
		return sqlitedb.Open("orders.db") // WAL, busy timeout, a pool of 16
	}
	db, err := gorm.Open(postgres.Open(dsn))
	if err != nil {
		return nil, err
	}
	// Every instance may hold this many of the server's connections.
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxOpenConns(20)
	sqlDB.SetMaxIdleConns(20)
	return db, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()

	ctx := context.Background()
	db, err := openDB()
	if err != nil {
		log.Fatal(err)
	}
	// Two tables: the application's orders, and the store's records.
	if err := db.AutoMigrate(&Order{}); err != nil {
		log.Fatal(err)
	}
	store, err := gormstore.New(db)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.AutoMigrate(ctx); err != nil {
		log.Fatal(err)
	}
	engine := idem.New(idem.Config{Store: store})

	byAccount := idemgin.WithScope(func(c *gin.Context) string { return c.GetString("account") })
	r := gin.New()
	r.Use(gin.Recovery())
	orders := r.Group("/orders", requireAccount, withTxSlot, idemgin.Middleware(engine, byAccount))
	orders.POST("", createOrder(db))
	log.Fatal(r.Run(*addr))
}

// requireAccount answers 401 before idemkit runs, so nothing is recorded.
func requireAccount(c *gin.Context) {
	account, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	if !ok || account == "" {
		c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"error": "missing bearer token"})
		return
	}
	c.Set("account", account)
}

// withTxSlot gives the request a place for its business transaction.
func withTxSlot(c *gin.Context) {
	ctx, done := gormstore.WithTxSlot(c.Request.Context())
	defer done()
	c.Request = c.Request.WithContext(ctx)
	c.Next()
}

func createOrder(db *gorm.DB) gin.HandlerFunc {
	return func(c *gin.Context) {
		var o Order
		if err := c.ShouldBindJSON(&o); err != nil || o.Item == "" || o.Quantity < 1 {
			c.JSON(http.StatusBadRequest, gin.H{"error": "item and a positive quantity are required"})
			return
		}
		tx, err := gormstore.Tx(c.Request.Context(), db)
		if err != nil {
			c.JSON(http.StatusInternalServerError, gin.H{"error": err.Error()})
			return
		}
		o.Account = c.GetString("account")
		if err := tx.Create(&o).Error; err != nil {
			c.JSON(http.StatusInternalServerError, gin.H{"error": err.Error()})
			return
		}
		c.Header("Location", fmt.Sprintf("/orders/%d", o.ID))
		c.JSON(http.StatusCreated, o)
	}
}
