package servers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/idempotency"
	fiberv3 "github.com/gofiber/fiber/v3"
	idempotencyv3 "github.com/gofiber/fiber/v3/middleware/idempotency"
	"github.com/labstack/echo/v4"
	echov5 "github.com/labstack/echo/v5"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	idemecho "github.com/idemkit/idemkit/adapters/echo"
	idemechov5 "github.com/idemkit/idemkit/adapters/echov5"
	idemfiber "github.com/idemkit/idemkit/adapters/fiber"
	idemfiberv3 "github.com/idemkit/idemkit/adapters/fiberv3"
	idemgin "github.com/idemkit/idemkit/adapters/gin"
	"github.com/idemkit/idemkit/bench/internal/lean"
	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemhttp"
	"github.com/idemkit/idemkit/core/memstore"
	"github.com/idemkit/idemkit/internal/costfloor"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	"github.com/idemkit/idemkit/stores/gorm/sqlitedb"
)

// Frameworks are the frameworks measured, in report order: echo and fiber
// are Echo v4 and Fiber v2.
var Frameworks = []string{"nethttp", "gin", "echo", "echov5", "fiber", "fiberv3"}

// Kinds of server.
const (
	Bare     = "bare"     // the handler alone
	Mem      = "mem"      // idemkit, memory store
	SQLite   = "sqlite"   // idemkit, GORM store on SQLite
	Insert   = "insert"   // the handler plus one plain INSERT through GORM on SQLite
	Postgres = "postgres" // idemkit, GORM store on PostgreSQL (net/http only)
	PGInsert = "pginsert" // the handler plus one plain INSERT through GORM on PostgreSQL (net/http only)
	Redis    = "redis"    // idemkit, Redis store (net/http only)
	SetNX    = "setnx"    // the handler plus one SET NX with an expiry on Redis (net/http only)
	Builtin  = "builtin"  // Fiber's own middleware/idempotency (Fiber v2 and v3 only)
	// Lean is minimal-lean (bench/internal/lean), the hand-written floor
	// idemkit is compared with (net/http only).
	Lean = "lean"
	// SQLiteTx and PGTx are idemkit with the GORM store's transactional
	// completion (gormstore.Tx): the handler INSERTs its order in the
	// request's transaction, which the completion commits with the record.
	// Their baselines are Insert and PGInsert, the same handler with its
	// INSERT alone (net/http only).
	SQLiteTx = "sqlitetx"
	PGTx     = "pgtx"
)

// Kinds are the kinds of server, in report order.
var Kinds = []string{Bare, Mem, Lean, SQLite, SQLiteTx, Insert, Postgres, PGTx, PGInsert, Redis, SetNX, Builtin}

// InTx reports whether kind's handler writes in the transaction
// gormstore.Tx gives it.
func InTx(kind string) bool { return kind == SQLiteTx || kind == PGTx }

// Valid reports whether the framework has that kind of server. The kinds
// on a database server are built on net/http alone: their figures are
// about the store, not the framework.
func Valid(framework, kind string) bool {
	switch {
	case !slices.Contains(Frameworks, framework) || !slices.Contains(Kinds, kind):
		return false
	case kind == Builtin:
		return framework == "fiber" || framework == "fiberv3"
	case Fleet(kind) || kind == Lean || kind == SQLiteTx:
		return framework == "nethttp"
	}
	return true
}

// Options configure Build.
type Options struct {
	Framework, Kind string
	// Dir holds the SQLite files.
	Dir string
	// MaxRecords bounds the memory store; the benchmark sets it high
	// enough that a run never fills the store (a full store answers 429,
	// which is not what is measured).
	MaxRecords int
	// PurgeInterval is the GORM store's purger interval (0: its default;
	// negative: no purger, see StartPurger).
	PurgeInterval time.Duration
	// PostgresDSN and RedisAddr locate the servers of the fleet kinds (see
	// FleetEnv), and Pool bounds each one's connection pool (0:
	// DefaultPool).
	PostgresDSN, RedisAddr string
	Pool                   int
	// Ablation takes parts out of the memory-store configuration's
	// Engine, for analysis (see internal/costfloor); the other
	// configurations ignore it.
	Ablation costfloor.Ablation
}

// Server is a built server, ready to serve on a listener or to be called
// in process.
type Server struct {
	Framework, Kind string
	Handler         http.Handler // net/http, Gin, Echo v4 and v5
	App             *fiber.App   // Fiber v2
	AppV3           *fiberv3.App // Fiber v3
	Engine          *idem.Engine // idemkit kinds
	Mem             *memstore.Store
	GORM            *gormstore.Store
	DB              *gorm.DB              // SQLite and PostgreSQL kinds
	Redis           redis.UniversalClient // Redis kinds
	// Namespace is the fleet kinds' PostgreSQL table or Redis key prefix,
	// the server's own: Close removes it.
	Namespace  string
	httpServer *http.Server
	closers    []func()
}

// Build builds the server o describes.
func Build(o Options) (*Server, error) {
	if !Valid(o.Framework, o.Kind) {
		return nil, fmt.Errorf("servers: no %q server on %q", o.Kind, o.Framework)
	}
	s := &Server{Framework: o.Framework, Kind: o.Kind}
	ords := &orders{}
	if o.Kind == SQLite || o.Kind == Insert || o.Kind == SQLiteTx {
		db, err := sqlitedb.Open(filepath.Join(o.Dir, o.Framework+"-"+o.Kind+".db"), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			return nil, err
		}
		s.DB = db
		s.closers = append(s.closers, func() {
			if sqlDB, err := db.DB(); err == nil {
				sqlDB.Close()
			}
		})
	}
	switch o.Kind {
	case Mem:
		s.Mem = memstore.New(memstore.WithMaxRecords(o.MaxRecords))
		s.closers = append(s.closers, func() { s.Mem.Close() })
		s.Engine = idem.New(o.Ablation.Apply(idem.Config{Store: s.Mem}))
	case SQLite:
		if err := s.buildGORM(o); err != nil {
			s.Close()
			return nil, err
		}
	case Insert, SQLiteTx:
		if err := s.DB.Exec(OrdersTable).Error; err != nil {
			s.Close()
			return nil, err
		}
		ords.db, ords.insert, ords.tx = s.DB, "INSERT INTO orders "+ordersColumns, o.Kind == SQLiteTx
		if ords.tx {
			if err := s.buildGORM(o); err != nil {
				s.Close()
				return nil, err
			}
		}
	case Postgres, PGInsert, PGTx:
		if err := s.buildPostgres(o, ords); err != nil {
			s.Close()
			return nil, err
		}
	case Redis, SetNX:
		if err := s.buildRedis(o, ords); err != nil {
			s.Close()
			return nil, err
		}
	}
	switch o.Framework {
	case "nethttp":
		s.Handler = netHTTP(ords, s.Engine)
		if o.Kind == Lean {
			s.Handler = lean.Middleware(netHTTP(ords, nil))
		}
		if ords.tx {
			s.Handler = gormstore.TxMiddleware(s.Handler)
		}
	case "gin":
		s.Handler = ginEngine(ords, s.Engine)
	case "echo":
		s.Handler = echoServer(ords, s.Engine)
	case "echov5":
		s.Handler = echoV5Server(ords, s.Engine)
	case "fiber":
		s.App = fiberApp(ords, s.Engine, o.Kind == Builtin)
	case "fiberv3":
		s.AppV3 = fiberV3App(ords, s.Engine, o.Kind == Builtin)
	}
	if s.Handler != nil {
		s.httpServer = &http.Server{Handler: s.Handler, ReadHeaderTimeout: time.Minute}
	}
	return s, nil
}

// buildGORM puts idemkit with a GORM store on s.DB in front of the
// handler, with the purger o asks for and the store's other defaults.
func (s *Server) buildGORM(o Options, opts ...gormstore.Option) error {
	switch {
	case o.PurgeInterval > 0:
		opts = append(opts, gormstore.WithPurgeInterval(o.PurgeInterval))
	case o.PurgeInterval < 0:
		opts = append(opts, gormstore.WithPurgeInterval(0))
	}
	gs, err := gormstore.New(s.DB, opts...)
	if err != nil {
		return err
	}
	s.GORM = gs
	s.closers = append(s.closers, func() { gs.Close() })
	if err := gs.AutoMigrate(context.Background()); err != nil {
		return err
	}
	s.Engine = idem.New(idem.Config{Store: gs})
	return nil
}

// StartPurger starts the GORM store's own background purger on the
// server's table, every interval: a second Store on the same database,
// whose only work is its purger, so that the moment purging starts is the
// caller's choice. Close stops it.
func (s *Server) StartPurger(interval time.Duration) error {
	if s.GORM == nil {
		return ErrNoStore
	}
	p, err := gormstore.New(s.DB, gormstore.WithPurgeInterval(interval), gormstore.WithTable(s.GORM.Table()))
	if err != nil {
		return err
	}
	s.closers = append(s.closers, func() { p.Close() })
	return nil
}

// Close releases the stores and the database.
func (s *Server) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}

// Serve serves on ln until Stop.
func (s *Server) Serve(ln net.Listener) error {
	switch {
	case s.App != nil:
		return s.App.Listener(ln)
	case s.AppV3 != nil:
		return s.AppV3.Listener(ln, fiberv3.ListenConfig{DisableStartupMessage: true})
	}
	return s.httpServer.Serve(ln)
}

// Stop closes the listener and the connections, then does what Close does.
func (s *Server) Stop() {
	switch {
	case s.App != nil:
		s.App.Shutdown()
	case s.AppV3 != nil:
		s.AppV3.Shutdown()
	default:
		s.httpServer.Close()
	}
	s.Close()
}

func netHTTP(ords *orders, e *idem.Engine) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+Path, func(w http.ResponseWriter, r *http.Request) {
		var o order
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil {
			http.Error(w, "bad JSON", http.StatusBadRequest)
			return
		}
		resp, err := ords.create(r.Context(), &o)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		json.NewEncoder(w).Encode(resp)
	})
	if e == nil {
		return mux
	}
	return idemhttp.Middleware(e)(mux)
}

func ginEngine(ords *orders, e *idem.Engine) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	gin.DefaultWriter, gin.DefaultErrorWriter = io.Discard, io.Discard
	r := gin.New()
	if e != nil {
		r.Use(idemgin.Middleware(e))
	}
	r.POST(Path, func(c *gin.Context) {
		var o order
		if err := c.ShouldBindJSON(&o); err != nil {
			c.String(http.StatusBadRequest, "bad JSON")
			return
		}
		resp, err := ords.create(c.Request.Context(), &o)
		if err != nil {
			c.String(http.StatusInternalServerError, err.Error())
			return
		}
		c.JSON(http.StatusCreated, resp)
	})
	return r
}

func echoServer(ords *orders, e *idem.Engine) http.Handler {
	x := echo.New()
	x.HideBanner, x.HidePort = true, true
	if e != nil {
		x.Use(idemecho.Middleware(e))
	}
	x.POST(Path, func(c echo.Context) error {
		var o order
		if err := c.Bind(&o); err != nil {
			return c.String(http.StatusBadRequest, "bad JSON")
		}
		resp, err := ords.create(c.Request().Context(), &o)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, resp)
	})
	return x
}

func fiberApp(ords *orders, e *idem.Engine, builtin bool) *fiber.App {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	switch {
	case e != nil:
		app.Use(idemfiber.New(e))
	case builtin:
		app.Use(idempotency.New(idempotency.Config{KeyHeader: "Idempotency-Key"}))
	}
	app.Post(Path, func(c *fiber.Ctx) error {
		var o order
		if err := c.BodyParser(&o); err != nil {
			return c.Status(http.StatusBadRequest).SendString("bad JSON")
		}
		resp, err := ords.create(c.UserContext(), &o)
		if err != nil {
			return err
		}
		return c.Status(http.StatusCreated).JSON(resp)
	})
	return app
}

func echoV5Server(ords *orders, e *idem.Engine) http.Handler {
	x := echov5.New()
	if e != nil {
		x.Use(idemechov5.Middleware(e))
	}
	x.POST(Path, func(c *echov5.Context) error {
		var o order
		if err := c.Bind(&o); err != nil {
			return c.String(http.StatusBadRequest, "bad JSON")
		}
		resp, err := ords.create(c.Request().Context(), &o)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, resp)
	})
	return x
}

// fiberV3App is fiberApp on Fiber v3. Its built-in idempotency middleware
// reads X-Idempotency-Key by default; it is given the header the load
// generator sends, whose UUID-shaped keys are the 36 characters it requires
// by default.
func fiberV3App(ords *orders, e *idem.Engine, builtin bool) *fiberv3.App {
	app := fiberv3.New()
	switch {
	case e != nil:
		app.Use(idemfiberv3.New(e))
	case builtin:
		app.Use(idempotencyv3.New(idempotencyv3.Config{KeyHeader: "Idempotency-Key"}))
	}
	app.Post(Path, func(c fiberv3.Ctx) error {
		var o order
		if err := c.Bind().Body(&o); err != nil {
			return c.Status(http.StatusBadRequest).SendString("bad JSON")
		}
		resp, err := ords.create(c.Context(), &o)
		if err != nil {
			return err
		}
		return c.Status(http.StatusCreated).JSON(resp)
	})
	return app
}

// ErrNoStore is returned by the fill functions for a server without an
// idemkit store.
var ErrNoStore = errors.New("servers: the server has no idemkit store")
