package idemhttp

import "net/http"

// Option configures the middleware.
type Option func(*options)

type options struct {
	scope func(*http.Request) string
}

// WithScope sets how a request's tenant is found (an account id, an API
// key's owner, ...): keys are unique per tenant, and tenants never see each
// other's records. Without it all requests share one global scope. It runs
// after the middleware registered before idemkit, such as authentication.
func WithScope(scope func(*http.Request) string) Option {
	return func(o *options) { o.scope = scope }
}
