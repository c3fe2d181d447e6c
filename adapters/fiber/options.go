package idemfiber

import "github.com/gofiber/fiber/v2"

// Option configures the middleware.
type Option func(*options)

type options struct {
	scope func(*fiber.Ctx) string
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
	return func(o *options) { o.scope = scope }
}
