package idemecho

import (
	"github.com/idemkit/idemkit/adapters/internal/echocore"
	"github.com/labstack/echo/v5"
)

// Option configures the middleware.
type Option func(*options)

// options are what the shared middleware takes.
type options struct {
	core echocore.Options[*echo.Context]
}

// WithScope sets how a request's tenant is found (an account id, an API
// key's owner, ...): keys are unique per tenant, and tenants never see each
// other's records. Without it all requests share one global scope. It runs
// after the middleware registered before idemkit, so it can read what an
// authentication middleware stored with c.Set.
func WithScope(scope func(*echo.Context) string) Option {
	return func(o *options) { o.core.Scope = scope }
}

// WithKey takes each request's key from key instead of the key header
// (Config.HeaderName): for a webhook, the id its sender gives each event
// (the Standard Webhooks webhook-id header, say), or an id the request
// carries elsewhere. The key it returns is parsed by the same rules as a
// header line (idem.ParseKey), and ok false is a request without a key,
// answered as the policy says (400 key-missing, or let through when keys
// are optional). If key reads the request body, it must leave it for the
// middleware to read.
func WithKey(key func(*echo.Context) (key string, ok bool)) Option {
	return func(o *options) { o.core.Key = key }
}

// WithSkipper lets every request for which skip returns true pass through
// untouched, as the Skipper of Echo's own middleware configs does (a
// middleware.Skipper can be passed as it is): the handler runs as if
// idemkit were not there, no key is needed or read, the body is not read,
// and nothing is recorded. For routes that are safe to repeat by nature,
// internal callers, or a migration that guards one client at a time. It is
// called only for the methods the Engine guards (Config.Methods), after the
// middleware registered before idemkit.
func WithSkipper(skip func(*echo.Context) bool) Option {
	return func(o *options) { o.core.Skip = skip }
}
