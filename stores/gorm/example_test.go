package gormstore_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	"github.com/idemkit/idemkit/core/idemhttp"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// A payments API whose charges and idempotency records share one SQLite
// database: the handler writes its charge through gormstore.Tx, and the
// charge commits together with the stored response.
func Example() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	db, err := sqlitedb.Open(filepath.Join(dir, "app.db"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	if sqlDB, err := db.DB(); err == nil {
		defer sqlDB.Close()
	}
	ctx := context.Background()
	store, err := gormstore.New(db)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	if err := store.AutoMigrate(ctx); err != nil {
		log.Fatal(err)
	}
	if err := db.Exec("CREATE TABLE charges (id INTEGER PRIMARY KEY, amount INTEGER NOT NULL)").Error; err != nil {
		log.Fatal(err)
	}

	createCharge := func(w http.ResponseWriter, r *http.Request) {
		tx, err := gormstore.Tx(r.Context(), db)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		// No Commit: the store commits when it records the response.
		if err := tx.Exec("INSERT INTO charges (amount) VALUES (1999)").Error; err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"amount":1999}`)
	}

	engine := idem.New(idem.Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", createCharge)
	srv := httptest.NewServer(gormstore.TxMiddleware(idemhttp.Middleware(engine)(mux)))
	defer srv.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/charges", strings.NewReader(`{"amount":1999}`))
		req.Header.Set("Idempotency-Key", `"order-1234"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get(exchange.ReplayedHeader), string(body))
	}
	var charges int
	db.Raw("SELECT COUNT(*) FROM charges").Scan(&charges)
	fmt.Println("charges:", charges)
	// Output:
	// 201  {"amount":1999}
	// 201 true {"amount":1999}
	// charges: 1
}
