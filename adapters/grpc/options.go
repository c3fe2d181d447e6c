package idemgrpc

import (
	"context"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Option configures the server interceptor.
type Option func(*options)

type options struct {
	scope   func(context.Context) string
	key     func(ctx context.Context, req any) (string, bool)
	guard   func(fullMethod string) bool
	replies map[string]protoreflect.MessageType
}

// WithScope sets how a call's tenant is found (an account id, the
// authenticated peer): keys are unique per tenant, and tenants never see
// each other's records. Without it all calls share one global scope. It
// gets the call's context as the interceptors chained before idemkit's
// left it, so it can read what an authentication interceptor put there;
// never derive it from metadata the client chooses freely.
func WithScope(scope func(ctx context.Context) string) Option {
	return func(o *options) { o.scope = scope }
}

// WithKey takes each call's key from key instead of the idempotency-key
// metadata entry: from a field of the request message, for instance (a
// request_id, as Google's AIP-155 has it). The key it returns is parsed by
// the same rules as a header line (idem.ParseKey), and ok false is a call
// without a key, answered as the policy says (INVALID_ARGUMENT, or let
// through when keys are optional).
func WithKey(key func(ctx context.Context, req any) (key string, ok bool)) Option {
	return func(o *options) { o.key = key }
}

// WithMethods sets which unary methods are guarded, by full method name
// ("/shop.v1.Charges/Create"); the others pass through untouched. Default:
// every method except those whose proto declares option idempotency_level
// NO_SIDE_EFFECTS or IDEMPOTENT.
func WithMethods(guarded func(fullMethod string) bool) Option {
	return func(o *options) { o.guard = guarded }
}

// WithReplyTypes gives the reply types of methods whose descriptors are
// not registered with protoregistry.GlobalFiles (generated code registers
// them, so this is for services declared by hand): replies maps a full
// method name to a message of its reply type, into a new one of which a
// replay is decoded. A guarded method whose reply type is known neither
// way is refused with INTERNAL before its handler runs, since its reply
// could not be replayed.
func WithReplyTypes(replies map[string]proto.Message) Option {
	return func(o *options) {
		if o.replies == nil {
			o.replies = map[string]protoreflect.MessageType{}
		}
		for method, reply := range replies {
			o.replies[method] = reply.ProtoReflect().Type()
		}
	}
}
