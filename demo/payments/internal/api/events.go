package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	gormstore "github.com/idemkit/idemkit/stores/gorm"

	"github.com/idemkit/idemkit/demo/payments/internal/payments"
	"github.com/idemkit/idemkit/demo/payments/internal/webhook"
)

// WebhookPath receives the payment provider's signed webhooks.
const WebhookPath = "/v1/webhooks/provider"

// The scopes of the records of the provider's events. An event has two
// records when it comes by webhook: its webhook's, in WebhookScope under
// the webhook-id, which replays the answer to a webhook delivered again;
// and its own, in EventScope under the event id (a job's, idem.JobID),
// which makes it apply once whichever way it comes, by webhook or by
// stream. Both begin "provider:", which no request's scope does
// (AccountScope): no client, whatever its bearer token, reaches them.
const (
	WebhookScope = providerScope + "webhooks"
	EventScope   = providerScope + "events"
)

// eventJob is the name of the job that applies an event: with its body,
// the fingerprint of the event's record.
const eventJob = "settle"

// ApplyEvent applies the provider's settlement event id, whose payload is
// body, once however often and by whichever way it comes: through
// Engine.Do, keyed by id in EventScope, its ledger entry commits in the
// same transaction as the event's record (with KeyedRows, in its own
// transaction instead), and the ledger answers an event it applied before
// with the entry it wrote then (payments.ApplyEvent). It returns the
// entry, as JSON, to the delivery that wrote it and to every later one.
// Errors: a payload that is no settlement event (ErrInvalid, before any
// record), an event the ledger refuses for good (*idem.PermanentError,
// recorded), and Do's: idem.ErrInProgress while another delivery applies
// it, idem.ErrKeyReused for another payload under the id, and the
// transient ones, after which a later delivery applies it.
func (a *API) ApplyEvent(ctx context.Context, id string, body []byte) ([]byte, error) {
	ev, err := payments.ParseEvent(id, body)
	if err != nil {
		return nil, err
	}
	// The event's own transaction slot: within a webhook, the request's
	// slot serves the webhook's record.
	ctx, done := gormstore.WithTxSlot(ctx)
	defer done()
	return a.Engine.Do(ctx, idem.Job{Scope: EventScope, Key: id, Name: eventJob, Payload: body}, func(ctx context.Context) ([]byte, error) {
		s, err := a.settle(ctx, ev)
		switch {
		case errors.Is(err, payments.ErrNotFound), errors.Is(err, payments.ErrEventMismatch):
			return nil, idem.Permanent(fmt.Errorf("event %s refused: %w", id, err))
		case err != nil:
			return nil, err
		}
		return settlementJSON(s), nil
	})
}

// settle writes ev's ledger entry under the event's record, which ctx
// holds: in the record's transaction, or with KeyedRows in one of its own.
// The ledger answers an event it settled before (its record expired or
// was lost) with the entry it wrote then.
func (a *API) settle(ctx context.Context, ev payments.Event) (payments.Settlement, error) {
	var s payments.Settlement
	var existing bool
	var err error
	if a.KeyedRows {
		s, existing, err = payments.ApplyEventAlone(a.DB.WithContext(context.WithoutCancel(ctx)), ev, a.Now())
	} else {
		tx, terr := gormstore.Tx(ctx, a.DB)
		if terr != nil {
			return payments.Settlement{}, terr
		}
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), idem.ErrLeaseLost) {
			return payments.Settlement{}, fmt.Errorf("%w: %w", payments.ErrLeaseLost, context.Cause(ctx))
		}
		s, existing, err = payments.ApplyEvent(tx, ev, a.Now())
	}
	if existing {
		a.Existing.Add(1)
		a.Logger.InfoContext(ctx, "event answered with the ledger entry already written for its charge or refund", slog.String("event", ev.ID))
	}
	return s, err
}

// settlementView is a ledger entry as the API shows it.
type settlementView struct {
	ID      int64  `json:"id"`
	Object  string `json:"object"`
	Event   string `json:"event"`
	Type    string `json:"type"`
	Settles string `json:"settles"`
	Amount  int64  `json:"amount"`
	Created string `json:"created"`
}

func viewSettlement(s payments.Settlement) settlementView {
	return settlementView{ID: s.ID, Object: "settlement", Event: s.Event, Type: s.Type, Settles: s.Object,
		Amount: s.Amount, Created: s.Created.UTC().Format(time.RFC3339)}
}

func settlementJSON(s payments.Settlement) []byte {
	b, err := json.Marshal(viewSettlement(s))
	if err != nil {
		panic(err) // a struct of strings and integers
	}
	return b
}

// maxWebhookBody is the largest webhook body read: the Engine's default
// MaxRequestBody, which the demo keeps.
const maxWebhookBody = 1 << 20

// CheckWebhook checks a webhook's signature (webhook.Secret.Verify)
// against the API's secret and clock. It returns the problem to answer a
// webhook that fails, and false; true for one that passes.
func (a *API) CheckWebhook(header func(string) string, body []byte) (exchange.Response, bool) {
	err := a.WebhookSecret.Verify(header, body, a.Now())
	switch {
	case err == nil:
		return exchange.Response{}, true
	case errors.Is(err, webhook.ErrStale):
		return a.Problem(http.StatusBadRequest, ProblemWebhookTimestampStale, "Webhook timestamp out of tolerance",
			"The webhook is refused ("+err.Error()+"): a delivery must be signed anew, within "+webhook.Tolerance.String()+" of the server's clock. Nothing was recorded."), false
	}
	return a.Problem(http.StatusBadRequest, ProblemWebhookSignatureInvalid, "Webhook signature invalid",
		"The webhook is refused ("+err.Error()+"): it must be signed with the endpoint's secret as the Standard Webhooks specification says. Nothing was recorded."), false
}

// VerifyWebhooks is net/http middleware that lets through only webhooks
// that pass ReadWebhook; it answers the others itself, before idemkit's
// middleware, so they record nothing.
func (a *API) VerifyWebhooks(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if resp, ok := a.ReadWebhook(r); !ok {
			WriteResponse(w, resp)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ReadWebhook reads r's body and checks the webhook (CheckWebhookBody),
// leaving the body to be read again: the handler applies the very bytes
// checked. It returns the problem to answer a webhook that fails, and
// false.
func (a *API) ReadWebhook(r *http.Request) (exchange.Response, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody+1))
	if resp, ok := a.CheckWebhookBody(r.Header.Get, r.Header.Values(contentEncoding), body, err); !ok {
		return resp, false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return exchange.Response{}, true
}

// contentEncoding is the header field that names a body's content codings.
const contentEncoding = "Content-Encoding"

// CheckWebhookBody checks a webhook before idemkit's middleware, so that
// one refused records nothing: its content codings (the values of its
// Content-Encoding fields), its body as received (body, which could not be
// read whole if err), and its signature (CheckWebhook). The caller applies
// body itself, the bytes the signature was checked over, never a decoded
// copy of them (Fiber's Ctx.Body decodes gzip). It returns the problem to
// answer a webhook that fails, and false; true for one that passes.
//
// A webhook with a content coding other than identity is refused 415, with
// Accept-Encoding: identity (RFC 9110, section 15.5.16): a Standard
// Webhooks sender sends its JSON as it is, and a framework that decodes a
// body while another does not would check one set of bytes and apply
// another.
func (a *API) CheckWebhookBody(header func(string) string, codings []string, body []byte, err error) (exchange.Response, bool) {
	for _, field := range codings {
		for _, coding := range strings.Split(field, ",") {
			if c := strings.TrimSpace(coding); c != "" && !strings.EqualFold(c, "identity") {
				resp := a.Problem(http.StatusUnsupportedMediaType, ProblemWebhookEncodingUnsupported, "Webhook content coding unsupported",
					"The webhook is refused: its body comes with Content-Encoding "+strconv.Quote(strings.Join(codings, ", "))+
						"; send it unencoded (identity), signed over the bytes sent. Nothing was recorded.")
				resp.Header = append(resp.Header, exchange.HeaderField{Name: "Accept-Encoding", Values: []string{"identity"}})
				return resp, false
			}
		}
	}
	switch {
	case err != nil:
		return a.Problem(http.StatusBadRequest, exchange.ProblemBodyUnreadable, "Request body unreadable", "The webhook's body could not be read; nothing was recorded."), false
	case len(body) > maxWebhookBody:
		return a.Problem(http.StatusRequestEntityTooLarge, exchange.ProblemPayloadTooLarge, "Payload too large",
			"A webhook body is at most "+strconv.Itoa(maxWebhookBody)+" bytes; nothing was recorded."), false
	}
	return a.CheckWebhook(header, body)
}

// receiveWebhook applies a webhook's event. It runs behind VerifyWebhooks
// and idemkit's middleware keyed by the webhook-id, whose record replays
// its answer to the provider's redeliveries.
func (a *API) receiveWebhook(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	result, err := a.ApplyEvent(r.Context(), r.Header.Get(webhook.HeaderID), body)
	if err != nil && (result == nil || !a.appliedUnrecorded(r.Context(), r.Header.Get(webhook.HeaderID), err)) {
		a.failEvent(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(result)
}

// failEvent answers an event that was not applied. Refusals for good are
// 4xx, recorded for the webhook; the others say that a later delivery may
// apply the event, and are not.
func (a *API) failEvent(w http.ResponseWriter, r *http.Request, err error) {
	var perm *idem.PermanentError
	switch {
	case errors.As(err, &perm):
		a.writeProblem(w, http.StatusUnprocessableEntity, ProblemEventRejected, "Event rejected",
			perm.Error()+". The ledger has no such charge or refund, or not with that amount: delivering the event again will not change that.")
	case errors.Is(err, idem.ErrKeyReused):
		a.writeProblem(w, http.StatusUnprocessableEntity, exchange.ProblemKeyReused, "Event id reused with another payload",
			"This event id was already applied with another payload.")
	case errors.Is(err, idem.ErrInProgress):
		resp := a.Problem(http.StatusConflict, exchange.ProblemInProgress, "Event being applied",
			"Another delivery of this event is being applied now. Not recorded: deliver it again after Retry-After seconds.")
		resp.Header = append(resp.Header, exchange.HeaderField{Name: "Retry-After", Values: []string{retryAfter}})
		WriteResponse(w, resp)
	case errors.Is(err, idem.ErrStoreUnavailable), errors.Is(err, idem.ErrStoreFull):
		a.writeProblem(w, http.StatusServiceUnavailable, exchange.ProblemStoreUnavailable, "Idempotency store unavailable",
			"The event's record could not be checked, so the event was not applied. Deliver it again later.")
	case errors.Is(err, idem.ErrRolledBack):
		a.writeProblem(w, http.StatusServiceUnavailable, ProblemDatabaseUnavailable, "Database unavailable",
			"The event's ledger entry could not be committed, so it was not applied. Deliver it again later.")
	case errors.Is(err, idem.ErrLockLost):
		a.writeProblem(w, http.StatusServiceUnavailable, ProblemLeaseLost, failures[failLeaseLost].title,
			"Another delivery of this event took it over while this one applied it, so this answer is not the event's. Not recorded: deliver it again to get the event's outcome.")
	default:
		a.fail(w, r, err)
	}
}

// listSettlements serves GET /v1/settlements: the account's ledger
// entries in the order they were written, a page at a time
// (?starting_after=<id of the last entry of the page before>).
func (a *API) listSettlements(w http.ResponseWriter, r *http.Request) {
	limit, err := pageLimit(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	after := int64(0)
	if v := r.URL.Query().Get("starting_after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			a.fail(w, r, payments.Invalid(payments.FieldError{Parameter: "starting_after", Detail: "must be the id of a ledger entry"}))
			return
		}
		after = n
	}
	list, more, err := payments.ListSettlements(r.Context(), a.DB, account(r), limit, after)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	views := make([]settlementView, len(list))
	for i, s := range list {
		views[i] = viewSettlement(s)
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": views, "has_more": more})
}

// ConsumeEvent applies an event read from the event stream, and reports
// whether its entry is done with (acknowledge it) or must be delivered
// again. Applied events are done, those whose record could not be kept
// too (idem.ErrNotRecorded: the work stands, logged as a warning), and so
// are those refused for good (a payload that is no event, an event the
// ledger refuses, an id reused with another payload), logged as errors:
// no redelivery would change them. Those another delivery is applying now
// (idem.ErrInProgress) or took over (idem.ErrLockLost), those whose work
// was undone (idem.ErrRolledBack), and those that met a failure that may
// pass, are left pending, as the policy asks of a queue: not
// acknowledged, delivered again later.
func (a *API) ConsumeEvent(ctx context.Context, id string, body []byte) (ack bool) {
	_, err := a.ApplyEvent(ctx, id, body)
	var perm *idem.PermanentError
	switch {
	case err == nil, a.appliedUnrecorded(ctx, id, err):
		return true
	case errors.Is(err, payments.ErrInvalid), errors.As(err, &perm), errors.Is(err, idem.ErrKeyReused):
		a.Logger.ErrorContext(ctx, "event refused for good: acknowledged without applying it", slog.String("event", id), slog.String("error", err.Error()))
		return true
	case errors.Is(err, idem.ErrInProgress):
		a.Logger.InfoContext(ctx, "event being applied by another delivery: left pending, delivered again later", slog.String("event", id))
	default:
		a.Logger.WarnContext(ctx, "event not applied: left pending, delivered again later", slog.String("event", id), slog.String("error", err.Error()))
	}
	return false
}

// appliedUnrecorded reports whether err, from ApplyEvent, says that the
// event was applied (or refused for good) but its record could not be
// kept (idem.ErrNotRecorded): done with, as the policy says, and logged as
// a warning, since nothing but the ledger now stops the event from being
// applied again.
func (a *API) appliedUnrecorded(ctx context.Context, id string, err error) bool {
	if !errors.Is(err, idem.ErrNotRecorded) {
		return false
	}
	a.Logger.WarnContext(ctx, "event done with, but its record could not be kept: a later delivery finds the ledger entry", slog.String("event", id),
		slog.String("error", err.Error()))
	return true
}
