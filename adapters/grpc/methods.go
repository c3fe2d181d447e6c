package idemgrpc

import (
	"strings"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// method is what the interceptors know of one RPC method: whether its
// calls are guarded (carry a key), and the type of its reply, which a
// replay is decoded into.
type method struct {
	guarded bool
	// keyRefused: the method is not guarded, yet its calls may have side
	// effects (neither its proto nor its service says a repetition is
	// harmless), so a call that carries a key is refused rather than run
	// unguarded (see server.intercept).
	keyRefused bool
	reply      protoreflect.MessageType // nil when neither a descriptor nor WithReplyTypes gives it
}

// methods resolves each method once, on its first call, and keeps the
// answer: a server's methods are a fixed set (gRPC answers a method it
// does not serve before any unary interceptor runs), so the cache stays
// as small as the service.
type methods struct {
	guard   func(fullMethod string) bool // nil: every method but the harmless ones (see resolve)
	replies map[string]protoreflect.MessageType
	cache   sync.Map // full method name -> *method
}

func (ms *methods) lookup(fullMethod string) *method {
	if m, ok := ms.cache.Load(fullMethod); ok {
		return m.(*method)
	}
	m, _ := ms.cache.LoadOrStore(fullMethod, ms.resolve(fullMethod))
	return m.(*method)
}

func (ms *methods) resolve(fullMethod string) *method {
	desc := methodDescriptor(fullMethod)
	m := &method{reply: ms.replies[fullMethod]}
	harmless := infrastructure(fullMethod) || repeatable(desc)
	if ms.guard != nil {
		m.guarded = ms.guard(fullMethod)
	} else {
		m.guarded = !harmless
	}
	m.keyRefused = !m.guarded && !harmless
	if m.reply == nil && desc != nil {
		if mt, err := protoregistry.GlobalTypes.FindMessageByName(desc.Output().FullName()); err == nil {
			m.reply = mt
		}
	}
	return m
}

// methodDescriptor returns the registered descriptor of the method a full
// method name ("/pkg.Service/Method") names, or nil. Generated code
// registers every service's descriptor with protoregistry.GlobalFiles.
func methodDescriptor(fullMethod string) protoreflect.MethodDescriptor {
	name := strings.TrimPrefix(fullMethod, "/")
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return nil
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name[:i] + "." + name[i+1:]))
	if err != nil {
		return nil
	}
	md, _ := d.(protoreflect.MethodDescriptor)
	return md
}

// repeatable reports whether a method's proto declares option
// idempotency_level = NO_SIDE_EFFECTS or IDEMPOTENT: gRPC's GET and PUT,
// which HTTP leaves alone too, since a read, or a call whose repetition
// changes nothing, needs no key. A method without a registered descriptor
// declares nothing.
func repeatable(desc protoreflect.MethodDescriptor) bool {
	if desc == nil {
		return false
	}
	opts, _ := desc.Options().(*descriptorpb.MethodOptions)
	switch opts.GetIdempotencyLevel() {
	case descriptorpb.MethodOptions_NO_SIDE_EFFECTS, descriptorpb.MethodOptions_IDEMPOTENT:
		return true
	}
	return false
}

// infrastructureServices are gRPC's own standard services, which a server
// registers beside its own and which change nothing of the application's:
// health checks (Kubernetes' gRPC probes call Health/Check), channelz and
// reflection. Their calls are not guarded by default, so that a probe
// needs no key.
var infrastructureServices = []string{
	"/grpc.health.v1.Health/",
	"/grpc.channelz.v1.Channelz/",
	"/grpc.reflection.v1.ServerReflection/",
	"/grpc.reflection.v1alpha.ServerReflection/",
}

// infrastructure reports whether fullMethod is a method of one of gRPC's
// standard infrastructure services.
func infrastructure(fullMethod string) bool {
	for _, prefix := range infrastructureServices {
		if strings.HasPrefix(fullMethod, prefix) {
			return true
		}
	}
	return false
}
