package server

import (
	"net/http"

	"github.com/idemkit/idemkit/core/idemhttp"
	gormstore "github.com/idemkit/idemkit/stores/gorm"

	"github.com/idemkit/idemkit/demo/payments/internal/api"
	"github.com/idemkit/idemkit/demo/payments/internal/checkout"
)

func newNetHTTP(cfg Config) http.Handler {
	guarded := idemhttp.Middleware(cfg.Engine, idemhttp.WithScope(func(r *http.Request) string {
		return scope(r.Header.Get("Authorization"))
	}))(apiHandler(cfg))
	v1 := authenticate(cfg.API, gormstore.TxMiddleware(guarded))
	webhooks := cfg.API.VerifyWebhooks(gormstore.TxMiddleware(idemhttp.Middleware(cfg.Engine,
		idemhttp.WithKey(func(r *http.Request) (string, bool) { return webhookID(r.Header.Get) }),
		idemhttp.WithScope(func(*http.Request) string { return webhookScope() }),
	)(cfg.API.WebhookHandler())))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("GET /{$}", cfg.Checkout)
	for _, path := range checkout.Paths[1:] {
		mux.Handle("GET "+path, cfg.Checkout)
	}
	if !cfg.SeparateAdmin {
		mux.Handle("GET /metrics", cfg.Metrics)
		mux.Handle("GET "+DebugPath, cfg.Debug)
	}
	mux.Handle("GET "+api.DocsPath, cfg.Docs)
	mux.Handle("GET "+api.DocsPath+"/", cfg.Docs)
	mux.Handle("/v1/", v1)
	mux.Handle("POST "+api.WebhookPath, webhooks)
	return recoverPanics(cfg.API, mux)
}

func authenticate(a *api.API, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := api.Account(r.Header.Get("Authorization")); !ok {
			api.WriteResponse(w, a.Unauthorized())
			return
		}
		next.ServeHTTP(w, r)
	})
}

// recoverPanics turns a panic into a 500 problem, as the other frameworks'
// recovery middleware does; idemkit has already released the key.
func recoverPanics(a *api.API, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				a.Logger.Error("panic", "panic", p)
				api.WriteResponse(w, frameworkError(a, 500))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
