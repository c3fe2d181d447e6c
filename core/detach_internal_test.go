package idem

import (
	"context"
	"errors"
	"testing"
)

type detachKey struct{}

// Finish's detached context keeps the request's values but neither its
// cancellation nor its cause, as context.WithoutCancel does: a store or an
// OnEvent hook asking context.Cause must not see the client's departure on
// a context that reports no error. (context.Cause answers nil for a
// context whose Err is nil since the Go release this module requires.)
func TestDetachedContextHidesTheRequestsCancellation(t *testing.T) {
	gone := errors.New("client went away")
	parent, cancel := context.WithCancelCause(context.WithValue(context.Background(), detachKey{}, "v"))
	cancel(gone)
	var l lock
	ctx := l.detach(parent)
	if ctx.Err() != nil || ctx.Done() != nil {
		t.Fatalf("detached context: Err %v, Done %v; want neither", ctx.Err(), ctx.Done())
	}
	if cause := context.Cause(ctx); cause != nil {
		t.Fatalf("Cause = %v on a context that reports no error; want nil", cause)
	}
	if ctx.Value(detachKey{}) != "v" {
		t.Fatal("the request's values are lost")
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	if child.Err() != nil || context.Cause(child) != nil {
		t.Fatalf("a context derived from it is cancelled: %v, %v", child.Err(), context.Cause(child))
	}
}
