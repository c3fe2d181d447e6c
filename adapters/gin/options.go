package idemgin

import "github.com/gin-gonic/gin"

// Option configures the middleware.
type Option func(*options)

type options struct {
	scope func(*gin.Context) string
}

// WithScope sets how a request's tenant is found (an account id, an API
// key's owner, ...): keys are unique per tenant, and tenants never see each
// other's records. Without it all requests share one global scope. It runs
// after the middleware registered before idemkit, so it can read what an
// authentication middleware stored with c.Set.
func WithScope(scope func(*gin.Context) string) Option {
	return func(o *options) { o.scope = scope }
}
