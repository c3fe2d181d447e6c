// Package api is the demo's HTTP API, written once as net/http handlers and
// mounted by every framework behind that framework's idemkit middleware.
package api

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
	gormstore "github.com/idemkit/idemkit/stores/gorm"
	"gorm.io/gorm"

	"github.com/idemkit/idemkit/demo/payments/internal/payments"
	"github.com/idemkit/idemkit/demo/payments/internal/webhook"
)

// DocsPath serves the published idempotency policy; every problem type URI,
// idemkit's and the demo's own, is a path under it.
const DocsPath = "/docs/idempotency"

// API serves the /v1 endpoints. Requests reach it authenticated: Account
// reads the account the auth middleware already checked.
type API struct {
	DB       *gorm.DB
	Provider payments.Authorizer
	// Now is the idempotency Engine's clock (idem.Config.Now).
	Now func() time.Time
	// TTL is the Engine's: how long a completed request's record is kept.
	// With KeyedRows, a row whose key's record has expired by then no
	// longer answers for the key (payments.RowKey).
	TTL    time.Duration
	Logger *slog.Logger
	// ProblemBase prefixes problem type names, e.g. "http://127.0.0.1:8080/docs/idempotency/".
	ProblemBase string
	// KeyedRows is set when the idempotency records are kept apart from
	// DB (in Redis), so that no transaction commits a charge together with
	// the record that replays it. Each charge and refund is then written
	// on its own, carrying its request's scoped idempotency key under a
	// unique index (payments.CreateChargeOnce): a retry whose record was
	// lost is answered with the row written the first time, never with a
	// second one.
	KeyedRows bool
	// Existing counts the charges and refunds answered with the row
	// already written under their key (KeyedRows only: their record was
	// lost, or their lease taken over while they ran), and the events
	// answered with the ledger entry already written for their charge or
	// refund (their record expired, was lost, or was taken over).
	Existing atomic.Int64
	// Engine applies the provider's events (ApplyEvent), and WebhookSecret
	// is the secret its webhooks are signed with.
	Engine        *idem.Engine
	WebhookSecret webhook.Secret
}

// Handler returns the /v1 routes.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", a.createCharge)
	mux.HandleFunc("POST /v1/refunds", a.createRefund)
	mux.HandleFunc("GET /v1/charges/{id}", a.getCharge)
	mux.HandleFunc("GET /v1/charges", a.listCharges)
	mux.HandleFunc("GET /v1/balance", a.balance)
	mux.HandleFunc("GET /v1/settlements", a.listSettlements)
	mux.HandleFunc("/", a.NotFound)
	return mux
}

// WebhookHandler returns the handler of POST WebhookPath, to mount behind
// VerifyWebhooks, a transaction slot, and idemkit's middleware taking the
// key from the webhook-id header in WebhookScope.
func (a *API) WebhookHandler() http.Handler { return http.HandlerFunc(a.receiveWebhook) }

// NotFound answers a path the demo does not serve.
func (a *API) NotFound(w http.ResponseWriter, _ *http.Request) {
	a.writeProblem(w, 404, ProblemNotFound, "Not found", "No such endpoint.")
}

// Account returns the account named by an "Authorization: Bearer <token>"
// header: any non-empty token names an account, created on first use.
// Basic authentication with the token as the user name and no password,
// as Stripe's clients may send their secret key, names the same account;
// with a password it names none.
func Account(authorization string) (string, bool) {
	if creds, ok := strings.CutPrefix(authorization, "Basic "); ok {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(creds))
		user, password, colon := strings.Cut(string(raw), ":")
		user = strings.TrimSpace(user)
		return user, err == nil && colon && password == "" && user != ""
	}
	token, ok := strings.CutPrefix(authorization, "Bearer ")
	token = strings.TrimSpace(token)
	return token, ok && token != ""
}

func account(r *http.Request) string {
	acct, _ := Account(r.Header.Get("Authorization"))
	return acct
}

// errNotGuarded: a charge (or, with KeyedRows, a refund) reached the
// handler without an idempotency key held for it, which only a server
// built without idemkit's middleware in front of the API can do. No money
// is taken without a key to give the provider, and no row is written
// without the key that keeps it single.
var errNotGuarded = errors.New("a charge or refund ran without an idempotency key held: the server must mount the API behind idemkit")

// The scopes of idempotency records. A request's is its account's
// (AccountScope); the provider's webhooks and events have theirs
// (WebhookScope, EventScope), which begin providerScope. No account's
// scope begins so, whatever its bearer token: one that would is escaped
// with escapedScope, and so is one that begins escapedScope itself, so
// that no two accounts share a scope either.
const (
	providerScope = "provider:"
	escapedScope  = "account:"
)

// AccountScope is the scope of account's idempotency records, over HTTP
// and gRPC: the account itself, or, for one that begins "provider:" or
// "account:", "account:" and the account. Accounts whose names begin
// otherwise (all but those two) keep the scope they had before the
// provider's scopes were set apart, and with it their records.
func AccountScope(account string) string {
	if strings.HasPrefix(account, providerScope) || strings.HasPrefix(account, escapedScope) {
		return escapedScope + account
	}
	return account
}

// RequestKey names the request key id in the database and to the payment
// provider: a hash of the account and the key, so that every attempt of
// one charge finds the same, two accounts never share one, and neither the
// rows nor the provider carry the account's bearer token. The account is
// the scope as AccountScope made it, unescaped. The provider's idempotency
// key for a charge derives from it and the number of the key's uses
// before (see payments.CreateCharge).
func RequestKey(id idem.ID) string {
	acct := strings.TrimPrefix(id.Scope, escapedScope)
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(acct)))])
	h.Write([]byte(acct))
	h.Write([]byte(id.Key))
	return "idem_" + hex.EncodeToString(h.Sum(nil))
}

// tx returns the request's business transaction: committed by the GORM
// store together with the stored response, rolled back if none is stored.
func (a *API) tx(ctx context.Context) func() (*gorm.DB, error) {
	return func() (*gorm.DB, error) { return gormstore.Tx(ctx, a.DB) }
}

func (a *API) createCharge(w http.ResponseWriter, r *http.Request) {
	var req payments.ChargeRequest
	if err := decode(r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	c, err := a.chargeUnderKey(r.Context(), account(r), r.URL.Path, req)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	// The charge's first answer, whichever attempt this is (see
	// payments.Charge.FirstAnswer); its Location is its id's, which never
	// changes.
	w.Header().Set("Location", "/v1/charges/"+c.ID)
	writeBody(w, http.StatusCreated, c.FirstAnswer())
}

// chargeUnderKey creates the charge req for account under the idempotency
// key ctx holds, in the transaction slot ctx carries: POST /v1/charges and
// the gRPC method ChargesCreate, at path, both come here once idemkit's
// middleware or interceptor holds the key. The provider gets an
// idempotency key of its own for the charge: the same for every attempt
// of it, derived from the request's key.
func (a *API) chargeUnderKey(ctx context.Context, account, path string, req payments.ChargeRequest) (payments.Charge, error) {
	held, ok := idem.HeldKey(ctx)
	if !ok {
		return payments.Charge{}, errNotGuarded
	}
	if a.KeyedRows {
		c, existing, err := payments.CreateChargeOnce(ctx, a.DB, a.Provider, account, a.rowKey(held), req)
		a.countExisting(ctx, path, existing)
		return c, err
	}
	return payments.CreateCharge(ctx, a.DB, a.tx(ctx), a.Provider, account, RequestKey(held.ID), req, a.Now())
}

func (a *API) createRefund(w http.ResponseWriter, r *http.Request) {
	var req payments.RefundRequest
	if err := decode(r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	var ref payments.Refund
	var err error
	if a.KeyedRows {
		held, ok := idem.HeldKey(r.Context())
		if !ok {
			a.fail(w, r, errNotGuarded)
			return
		}
		var existing bool
		ref, existing, err = payments.CreateRefundOnce(r.Context(), a.DB, account(r), a.rowKey(held), req)
		a.countExisting(r.Context(), r.URL.Path, existing)
	} else {
		ref, err = payments.CreateRefund(r.Context(), a.tx(r.Context()), account(r), req, a.Now())
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeBody(w, http.StatusCreated, ref.FirstAnswer())
}

// rowKey is the key the rows of the request holding held are written
// under (KeyedRows), at the time of the Engine's clock.
func (a *API) rowKey(held idem.Held) payments.RowKey {
	return payments.RowKey{Key: RequestKey(held.ID), Now: a.Now(), TTL: a.TTL}
}

// countExisting counts and logs a request to path answered with the row
// written under its key by an earlier attempt.
func (a *API) countExisting(ctx context.Context, path string, existing bool) {
	if existing {
		a.Existing.Add(1)
		a.Logger.InfoContext(ctx, "answered with the row already written under the request's idempotency key",
			slog.String("path", path))
	}
}

func (a *API) getCharge(w http.ResponseWriter, r *http.Request) {
	c, err := payments.GetCharge(r.Context(), a.DB, account(r), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c.View())
}

// maxPage is the most items one page of a list returns (GET
// /v1/charges, GET /v1/settlements).
const maxPage = 100

// pageLimit reads a list's ?limit: maxPage without it.
func pageLimit(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return maxPage, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxPage {
		return 0, payments.Invalid(payments.FieldError{Parameter: "limit", Detail: "must be an integer from 1 to " + strconv.Itoa(maxPage)})
	}
	return n, nil
}

func (a *API) listCharges(w http.ResponseWriter, r *http.Request) {
	limit, err := pageLimit(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	charges, more, err := payments.ListCharges(r.Context(), a.DB, account(r), limit, r.URL.Query().Get("starting_after"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	views := make([]payments.ChargeView, len(charges))
	for i, c := range charges {
		views[i] = c.View()
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": views, "has_more": more})
}

func (a *API) balance(w http.ResponseWriter, r *http.Request) {
	b, err := payments.GetBalance(r.Context(), a.DB, account(r))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

// ProviderDebug serves GET /debug/provider: what the simulated payment
// provider did for the caller's account (see payments.Counts), so that a
// load test against a running demo can hold the money taken against the
// charges recorded. It is not part of the /v1 API, and shows an account
// nothing but its own counts.
func (a *API) ProviderDebug(p *payments.Provider) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		acct, ok := Account(r.Header.Get("Authorization"))
		if !ok {
			WriteResponse(w, a.Unauthorized())
			return
		}
		writeJSON(w, http.StatusOK, p.Counts(acct))
	})
}

// failure is what became of a request that failed, whichever way it
// came: fail answers it over HTTP, grpcStatus over gRPC.
type failure int

const (
	failInternal failure = iota
	failInvalid
	failDeclined
	failKeyReused
	failNotFound
	failOverRefund
	failLeaseLost
	failProviderDown
	failTimedOut
	failClientGone
	failDatabaseUnavailable
)

// classify tells which failure err, ending a request on ctx with method
// and path, is, and logs it as it deserves. Only a transient provider
// failure, an unavailable database, a request abandoned (its key lost,
// its time up, its client gone) and unexpected errors are answered as
// failures of the server's (5xx, or the gRPC codes idemkit does not
// record), so that a retry runs again. Only an unexpected error is logged
// at ERROR; a client that went away is no failure of the demo's, and is
// logged once, at INFO.
func (a *API) classify(ctx context.Context, err error, method, path string) failure {
	switch {
	case errors.Is(err, payments.ErrInvalid):
		return failInvalid
	case errors.Is(err, payments.ErrDeclined):
		return failDeclined
	case errors.Is(err, payments.ErrKeyReused):
		return failKeyReused
	case errors.Is(err, payments.ErrNotFound):
		return failNotFound
	case errors.Is(err, payments.ErrOverRefund):
		return failOverRefund
	case errors.Is(err, payments.ErrLeaseLost):
		a.Logger.WarnContext(ctx, "charge abandoned: its idempotency lease was lost while the provider worked")
		return failLeaseLost
	case errors.Is(err, payments.ErrProviderDown):
		return failProviderDown
	case errors.Is(context.Cause(ctx), idem.ErrHandlerTimeout):
		a.Logger.WarnContext(ctx, "request abandoned: it ran for a whole lease", slog.String("error", err.Error()))
		return failTimedOut
	case clientGone(ctx):
		a.Logger.InfoContext(ctx, "request abandoned: the client closed the connection before the answer",
			slog.String("method", method), slog.String("path", path))
		return failClientGone
	case a.databaseUnavailable(ctx, err):
		a.Logger.WarnContext(ctx, "request failed: the database is unavailable", slog.String("error", err.Error()))
		return failDatabaseUnavailable
	}
	a.Logger.ErrorContext(ctx, "request failed", slog.String("error", err.Error()))
	return failInternal
}

// failures are the answers to each failure but failInvalid, whose
// answer lists what is wrong (API.invalid): the HTTP status and problem,
// whose detail the gRPC status's message repeats.
var failures = map[failure]struct {
	status              int
	name, title, detail string
}{
	failDeclined: {402, ProblemCardDeclined, "Card declined", "The customer's card was declined. No charge was made."},
	// The same answer idemkit gives for a reused key, which it would have
	// given here had the key's record not been lost.
	failKeyReused: {422, exchange.ProblemKeyReused, "Idempotency-Key reused with a different request",
		"This Idempotency-Key was already used with a different request (method, path or body)."},
	failNotFound:   {404, ProblemNotFound, "Not found", "No such charge for this account."},
	failOverRefund: {400, ProblemRefundTooLarge, "Refund too large", payments.ErrOverRefund.Error() + "."},
	failLeaseLost: {503, ProblemLeaseLost, "Request superseded",
		"This attempt lost its hold on the Idempotency-Key while it ran, so it wrote nothing. Not recorded: retry with the same Idempotency-Key to get the charge's outcome."},
	failProviderDown: {503, ProblemProviderUnavailable, "Payment provider unavailable",
		"The payment provider failed transiently. No charge was made; retry with the same Idempotency-Key."},
	failTimedOut: {503, ProblemTimedOut, "Request timed out",
		"The request ran too long and was abandoned, so nothing was written. Not recorded: retry with the same Idempotency-Key; the payment provider got this charge's own idempotency key, so the money is taken once."},
	// Nobody reads this answer. It is a 503 so that idemkit does not
	// record it: the request did not complete, and a retry must run it.
	failClientGone: {503, ProblemClientClosedRequest, "Client closed the request",
		"The client closed the connection before the answer, so the request was abandoned and nothing was written. Not recorded: retry with the same Idempotency-Key; the payment provider got this charge's own idempotency key, so the money is taken once."},
	failDatabaseUnavailable: {503, ProblemDatabaseUnavailable, "Database unavailable",
		"The database could not be reached while the request ran, so nothing was written. Not recorded: retry with the same Idempotency-Key; the payment provider got this charge's own idempotency key, so the money is taken once."},
	failInternal: {500, ProblemInternalError, "Internal error", "The request failed. No charge was made; retry with the same Idempotency-Key."},
}

// fail maps business errors to problems (classify).
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	f := a.classify(r.Context(), err, r.Method, r.URL.Path)
	if f == failInvalid {
		WriteResponse(w, a.invalid(err))
		return
	}
	p := failures[f]
	a.writeProblem(w, p.status, p.name, p.title, p.detail)
}

// clientGone reports whether ctx, a request's, ended because its client
// went away (net/http cancels it when the connection closes), rather than
// because the request lost its key or ran out of time, which idemkit
// reports as the cause.
func clientGone(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled)
}

func writeJSON(w http.ResponseWriter, status int, v any) { writeBody(w, status, mustJSON(v)) }

// writeBody writes a JSON body rendered already.
func writeBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// mustJSON encodes v, one of the API's views.
func mustJSON(v any) []byte {
	body, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs and maps of them are encoded here
	}
	return body
}

// Problem renders one of the demo's own problems. A 503 carries
// Retry-After: the request may succeed if sent again.
func (a *API) Problem(status int, name, title, detail string) exchange.Response {
	resp := exchange.Problem{Type: a.ProblemBase + name, Title: title, Status: status, Detail: detail}.Response()
	if status == http.StatusServiceUnavailable {
		resp.Header = append(resp.Header, exchange.HeaderField{Name: "Retry-After", Values: []string{retryAfter}})
	}
	return resp
}

// Unauthorized is the answer to a /v1 request without a bearer token. Its
// WWW-Authenticate field names the scheme to use (RFC 9110, RFC 6750).
func (a *API) Unauthorized() exchange.Response {
	resp := a.Problem(401, ProblemUnauthorized, "Unauthorized", "Send an Authorization: Bearer <token> header; any non-empty token names an account.")
	resp.Header = append(resp.Header, exchange.HeaderField{Name: "WWW-Authenticate", Values: []string{`Bearer realm="payments demo"`}})
	return resp
}

// invalid is the 400 invalid-request problem for err, which wraps
// payments.ErrInvalid. Its member "errors" lists what is wrong, each entry
// naming the part of the request at fault (RFC 9457 section 3's example:
// a "pointer" into the body, or a query "parameter" or a "header") and
// saying what it must be in "detail"; the problem's own detail says it all
// in one sentence.
func (a *API) invalid(err error) exchange.Response {
	inv, detail := invalidDetail(err)
	resp := a.Problem(http.StatusBadRequest, ProblemInvalidRequest, "Invalid request", detail)
	if len(inv.Errors) == 0 {
		return resp
	}
	list, merr := json.Marshal(inv.Errors)
	if merr != nil {
		panic(merr) // a slice of plain structs of strings
	}
	// The problem's object, with one member more.
	body := append(resp.Body[:len(resp.Body)-1:len(resp.Body)-1], `,"errors":`...)
	resp.Body = append(append(body, list...), '}')
	return resp
}

// invalidDetail is the InvalidError err wraps, and the sentence that says
// all that is wrong.
func invalidDetail(err error) (*payments.InvalidError, string) {
	var inv *payments.InvalidError
	if !errors.As(err, &inv) {
		inv = &payments.InvalidError{}
	}
	if len(inv.Errors) == 0 {
		return inv, "The request is invalid; nothing was done."
	}
	return inv, "The request is invalid: " + inv.Summary() + ". Nothing was done."
}

func (a *API) writeProblem(w http.ResponseWriter, status int, name, title, detail string) {
	WriteResponse(w, a.Problem(status, name, title, detail))
}

// WriteResponse writes a rendered response to a net/http writer.
func WriteResponse(w http.ResponseWriter, resp exchange.Response) {
	h := w.Header()
	for _, f := range resp.Header {
		h[http.CanonicalHeaderKey(f.Name)] = f.Values
	}
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
}
