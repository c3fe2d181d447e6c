package server

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	idemgin "github.com/idemkit/idemkit/adapters/gin"
	"github.com/idemkit/idemkit/core/exchange"
	gormstore "github.com/idemkit/idemkit/stores/gorm"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
)

func newGin(cfg Config) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.CustomRecovery(func(c *gin.Context, _ any) {
		writeGin(c, frameworkError(cfg.API, 500))
	}))
	// Gin routes HEAD only where it is registered.
	for _, p := range pages(cfg) {
		r.Match(getOnly, p.path, gin.WrapH(p.handler))
	}

	r.POST(api.WebhookPath,
		func(c *gin.Context) {
			if resp, ok := cfg.API.ReadWebhook(c.Request); !ok {
				writeGin(c, resp)
				c.Abort()
			}
		},
		ginTxSlot,
		idemgin.Middleware(cfg.Engine,
			idemgin.WithKey(func(c *gin.Context) (string, bool) { return webhookID(c.GetHeader) }),
			idemgin.WithScope(func(*gin.Context) string { return webhookScope() })),
		gin.WrapH(cfg.API.WebhookHandler()),
	)
	v1 := r.Group("/v1",
		func(c *gin.Context) {
			if _, ok := api.Account(c.GetHeader("Authorization")); !ok {
				writeGin(c, cfg.API.Unauthorized())
				c.Abort()
			}
		},
		ginTxSlot,
		idemgin.Middleware(cfg.Engine, idemgin.WithScope(func(c *gin.Context) string {
			return scope(c.GetHeader("Authorization"))
		})),
	)
	// Each /v1 route of the table, rather than one catch-all under /v1:
	// Gin's router holds no static route (the webhooks') beside a
	// catch-all of the same prefix.
	h := gin.WrapH(apiHandler(cfg))
	for _, rt := range apiRoutes(cfg) {
		if path, ok := strings.CutPrefix(rt.pattern, "/v1/"); ok && rt.pattern != api.WebhookPath {
			v1.Match(rt.methods, "/"+ginPattern(path), h)
		}
	}
	return r
}

// ginPattern writes a route pattern's {name} segments as Gin's :name.
func ginPattern(pattern string) string {
	segs := strings.Split(pattern, "/")
	for i, s := range segs {
		if name, ok := strings.CutPrefix(s, "{"); ok {
			segs[i] = ":" + strings.TrimSuffix(name, "}")
		}
	}
	return strings.Join(segs, "/")
}

// ginTxSlot gives the request a transaction slot (gormstore.WithTxSlot).
func ginTxSlot(c *gin.Context) {
	ctx, done := gormstore.WithTxSlot(c.Request.Context())
	defer done()
	c.Request = c.Request.WithContext(ctx)
	c.Next()
}

func writeGin(c *gin.Context, resp exchange.Response) { api.WriteResponse(c.Writer, resp) }
