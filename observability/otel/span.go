package idemotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemevent"
)

// annotate adds ev to the recording span in ctx: a span event, the
// decision's attributes, the store's error as an exception, and the
// status Error where the request failed or ran unprotected (see
// failsRequest).
func annotate(ctx context.Context, ev *idemevent.Event) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	kind := ev.Kind.String()
	hash := ev.KeyHash()
	var buf [3]attribute.KeyValue
	attrs := buf[:0]
	if hash != "" {
		attrs = append(attrs, SpanAttrKeyHash.String(hash))
	}
	if ev.Status != 0 {
		attrs = append(attrs, SpanAttrStatus.Int(ev.Status))
	}
	if ev.Reason != "" {
		attrs = append(attrs, SpanAttrReason.String(string(ev.Reason)))
	}
	span.AddEvent("idempotency."+kind, trace.WithAttributes(attrs...))
	if ev.Kind.IsDecision() {
		span.SetAttributes(SpanAttrOutcome.String(kind))
		if hash != "" {
			span.SetAttributes(SpanAttrKeyHash.String(hash))
		}
	}
	if ev.Err != nil {
		span.RecordError(ev.Err)
	}
	if failsRequest(ev) {
		err := ev.Err
		if err == nil {
			err = idem.ErrLeaseLost
		}
		span.SetStatus(codes.Error, "idempotency "+kind+": "+err.Error())
	}
}

// failsRequest reports whether ev makes its request's span an error: the
// store failed it (503, or a run without protection, or a response not
// recorded), its lease was lost, or a timeout inside idemkit answered for
// it. A renew-error alone does not: the renewal is tried again, and a
// request whose next renewal succeeds ends well (OpenTelemetry leaves the
// status of an operation that recovered from an error unset); its
// exception event stays on the span all the same.
func failsRequest(ev *idemevent.Event) bool {
	switch ev.Kind {
	case idemevent.LeaseLost:
		return true
	case idemevent.RenewError:
		return false
	}
	return ev.Err != nil
}
