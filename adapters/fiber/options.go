package idemfiber

import (
	"github.com/gofiber/fiber/v2"

	"github.com/idemkit/idemkit/adapters/internal/fasthttpcore"
)

// Option configures the middleware.
type Option func(*options)

// options are what the shared middleware takes.
type options struct {
	core fasthttpcore.Options[*fiber.Ctx]
}

// WithScope sets how a request's tenant is found (an account id, an API
// key's owner, ...): keys are unique per tenant, and tenants never see each
// other's records. Without it all requests share one global scope. It runs
// after the middleware registered before idemkit, such as authentication.
// Derive it from authentication (what an auth middleware stored in
// c.Locals), never from a header the client chooses freely, or a client
// could probe another tenant's keys. The middleware copies the returned
// string, so scope may return a value that aliases fasthttp's buffers.
func WithScope(scope func(*fiber.Ctx) string) Option {
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
// The middleware copies the returned key, so key may return a value that
// aliases fasthttp's buffers.
func WithKey(key func(*fiber.Ctx) (key string, ok bool)) Option {
	return func(o *options) { o.core.Key = key }
}

// WithNext lets every request for which next returns true pass through
// untouched, as the Next field of Fiber's own middleware configs does: the
// handler runs as if idemkit were not there, no key is needed or read, and
// nothing is recorded. For routes that are safe to repeat by nature,
// internal callers, or a migration that guards one client at a time. It is
// called only for the methods the Engine guards (Config.Methods), after the
// middleware registered before idemkit.
func WithNext(next func(*fiber.Ctx) bool) Option {
	return func(o *options) { o.core.Next = next }
}
