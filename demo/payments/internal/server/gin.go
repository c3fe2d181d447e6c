package server

import (
	"net/http"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idemkit/adapters/gin"
	idem "github.com/idemkit/idemkit/core"
	gormstore "github.com/idemkit/idemkit/stores/gorm"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/checkout"
)

func newGin(cfg Config) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.CustomRecovery(func(c *gin.Context, _ any) {
		writeGin(c, frameworkError(cfg.API, 500))
	}))
	// Gin routes HEAD only where it is registered.
	get := func(path string, h http.Handler) {
		r.Match([]string{http.MethodGet, http.MethodHead}, path, gin.WrapH(h))
	}
	get("/healthz", http.HandlerFunc(healthz))
	for _, path := range checkout.Paths {
		get(path, cfg.Checkout)
	}
	if !cfg.SeparateAdmin {
		get("/metrics", cfg.Metrics)
	}
	get(api.DocsPath, cfg.Docs)
	get(api.DocsPath+"/:name", cfg.Docs)
	get(DebugPath, cfg.Debug)

	v1 := r.Group("/v1",
		func(c *gin.Context) {
			if _, ok := api.Account(c.GetHeader("Authorization")); !ok {
				writeGin(c, cfg.API.Unauthorized())
				c.Abort()
			}
		},
		func(c *gin.Context) {
			ctx, done := gormstore.WithTxSlot(c.Request.Context())
			defer done()
			c.Request = c.Request.WithContext(ctx)
			c.Next()
		},
		idemgin.Middleware(cfg.Engine, idemgin.WithScope(func(c *gin.Context) string {
			return scope(c.GetHeader("Authorization"))
		})),
	)
	v1.Any("/*path", gin.WrapH(apiHandler(cfg)))
	return r
}

func writeGin(c *gin.Context, resp idem.Response) { api.WriteResponse(c.Writer, resp) }
