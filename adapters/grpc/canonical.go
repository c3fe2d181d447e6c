package idemgrpc

import (
	"bytes"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
)

// A call's fingerprint hashes its request message in deterministic
// encoding, which orders known fields and map entries, but keeps two
// things as they came, which differ between two sendings of one message:
// the fields the server does not know (a client one schema version ahead
// sends its map fields' entries in any order), and the value of a
// google.protobuf.Any (packed by the sender's own encoder, maps in any
// order). canonical makes both the same for every sending:
//
//   - the unknown fields of every message are sorted, by field number and
//     then by their encoding: a multiset, since the server cannot tell a
//     map from a list in a field it does not know, and reads neither;
//     a length-delimited one that is itself a well-formed message (a map
//     entry, a nested message) is made canonical the same way first;
//   - an Any whose type the server knows is decoded and encoded again,
//     canonically; one whose type it does not know is treated as a
//     message of unknown fields.
//
// Known fields are never touched: two messages the server reads
// differently never share a fingerprint.

// canonicalLimit bounds how deep canonical follows nested unknown
// messages, so that a hostile message cannot make it recurse without end.
const canonicalLimit = 32

// canonical returns msg, or a canonical copy of it if anything in it
// would differ between two sendings.
func canonical(msg proto.Message) proto.Message {
	if !needsCanonical(msg.ProtoReflect(), 0) {
		return msg
	}
	c := proto.Clone(msg)
	canonicalize(c.ProtoReflect(), 0)
	return c
}

// needsCanonical reports whether m holds unknown fields or an Any, at any
// depth.
func needsCanonical(m protoreflect.Message, depth int) bool {
	if depth > canonicalLimit {
		return false
	}
	if len(m.GetUnknown()) > 0 || m.Descriptor().FullName() == anyName {
		return true
	}
	found := false
	eachMessage(m, func(sub protoreflect.Message) bool {
		found = needsCanonical(sub, depth+1)
		return !found
	})
	return found
}

// canonicalize makes m canonical in place (see canonical).
func canonicalize(m protoreflect.Message, depth int) {
	if depth > canonicalLimit {
		return
	}
	if m.Descriptor().FullName() == anyName {
		canonicalAny(m, depth)
	}
	if u := m.GetUnknown(); len(u) > 0 {
		m.SetUnknown(canonicalFields(u, depth))
	}
	eachMessage(m, func(sub protoreflect.Message) bool {
		canonicalize(sub, depth+1)
		return true
	})
}

// eachMessage calls f for every message held in m's populated fields
// (singular, repeated and map values), until f returns false.
func eachMessage(m protoreflect.Message, f func(protoreflect.Message) bool) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				return true
			}
			more := true
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				more = f(mv.Message())
				return more
			})
			return more
		case fd.Message() == nil:
			return true
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if !f(l.Get(i).Message()) {
					return false
				}
			}
			return true
		}
		return f(v.Message())
	})
}

var anyName = (*anypb.Any)(nil).ProtoReflect().Descriptor().FullName()

// canonicalAny makes the value of the Any m canonical.
func canonicalAny(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	urlField, valueField := fields.ByNumber(1), fields.ByNumber(2)
	value := m.Get(valueField).Bytes()
	if len(value) == 0 {
		return
	}
	var out []byte
	if mt, err := protoregistry.GlobalTypes.FindMessageByURL(m.Get(urlField).String()); err == nil {
		inner := mt.New()
		if proto.Unmarshal(value, inner.Interface()) != nil {
			return // not what its type says: hashed as sent
		}
		canonicalize(inner, depth+1)
		if out, err = deterministic.Marshal(inner.Interface()); err != nil {
			return
		}
	} else {
		out = canonicalFields(value, depth)
	}
	m.Set(valueField, protoreflect.ValueOfBytes(out))
}

// canonicalFields returns the wire-format fields b, sorted (see
// canonical), or b itself if it is not a well-formed sequence of fields.
func canonicalFields(b []byte, depth int) []byte {
	var fields [][]byte
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return b
		}
		m := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if m < 0 {
			return b
		}
		field := rest[:n+m]
		if typ == protowire.BytesType && depth < canonicalLimit {
			v, _ := protowire.ConsumeBytes(rest[n:])
			if c := canonicalFields(v, depth+1); !bytes.Equal(c, v) {
				field = protowire.AppendBytes(protowire.AppendTag(nil, num, typ), c)
			}
		}
		fields = append(fields, field)
		rest = rest[n+m:]
	}
	slices.SortStableFunc(fields, func(a, b []byte) int {
		na, _, _ := protowire.ConsumeTag(a)
		nb, _, _ := protowire.ConsumeTag(b)
		if na != nb {
			return int(na) - int(nb)
		}
		return bytes.Compare(a, b)
	})
	return bytes.Join(fields, nil)
}
