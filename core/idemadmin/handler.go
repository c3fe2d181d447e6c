package idemadmin

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/exchange"
)

// The handler's operations, by the last segment of the request's path:
//
//	POST .../get     {"scope": S, "key": K, "body": bool}  -> Info
//	POST .../forget  {"scope": S, "key": K, "force": bool} -> {"forgotten": true}
//	GET  .../stats?top=N                                   -> Stats
//	POST .../purge   {"batch": N}                          -> {"purged": N}
//
// Scopes and keys go in the body, never in the URL, which access logs
// keep. Errors are problem+json (RFC 9457) with a type under ProblemBase.
const (
	PathGet    = "get"
	PathForget = "forget"
	PathStats  = "stats"
	PathPurge  = "purge"
)

// ProblemBase prefixes the names of the handler's problem types:
// forbidden, unauthorized, bad-request, not-found, in-flight, changed and
// store-error.
const ProblemBase = "https://github.com/idemkit/idemkit/blob/main/docs/operations.md#admin-"

// RecordRequest is the body of a get or forget request.
type RecordRequest struct {
	Scope string `json:"scope"`
	Key   string `json:"key"`
	// Body asks get for the stored body.
	Body bool `json:"body,omitempty"`
	// Force lets forget delete a record in flight (see Store.Forget).
	Force bool `json:"force,omitempty"`
}

// PurgeRequest is the body of a purge request, {} at least; a Batch of 0
// is DefaultPurgeBatch.
type PurgeRequest struct {
	Batch int `json:"batch,omitempty"`
}

// PurgeResult is the answer to a purge request.
type PurgeResult struct {
	Purged int `json:"purged"`
}

// HandlerOptions configure Handler.
type HandlerOptions struct {
	// Now is the clock records are judged by: give the Engine's
	// (nil: time.Now).
	Now func() time.Time
	// Note, if set, is added to the Stats the handler returns, to say what
	// they cannot see.
	Note string
	// Token, if set, is the credential that opens the handler to peers
	// beyond loopback: every request must then carry it as
	// "Authorization: Bearer <Token>" (compared in constant time). Empty,
	// the handler serves loopback peers only. Read it from a file or the
	// environment, never from a command line, which any user of the
	// machine can read.
	Token string
	// Logger gets an audit line for every forget and purge (the scope's
	// and key's hashes, the peer, the outcome), and the store's errors,
	// which the caller is only told happened (they may name users,
	// databases, hosts). Nil: slog.Default().
	Logger *slog.Logger
	// Secret keys the hashes that stand for scopes and keys in the audit
	// lines and in the largest scopes of stats (ScopeLabel, KeyHash). Give
	// the Engine's Config.KeyHashSecret, so that an audit line's key_hash
	// is the one the Engine's lines about that key carry. Nil: a random
	// secret, drawn per Handler.
	Secret []byte
}

// maxRequest bounds a request's body: a key is at most 255 bytes, a scope
// whatever a tenant function returns, but not megabytes.
const maxRequest = 64 << 10

// defaultTopScopes is the number of scopes stats returns without ?top=.
const defaultTopScopes = 10

// Handler serves s's operations as JSON, for an admin listener of its own,
// never the API's and never the one Prometheus scrapes: it can make a
// completed request run again. Without o.Token it serves loopback peers
// only; it never serves a request a browser makes for a page (see the
// door's rules in door.go, and docs/operations.md, "The admin endpoint").
// Mount it under a path of its own, such as "/idemadmin/": it answers by
// the last segment of the path.
func Handler(s Store, o HandlerOptions) http.Handler {
	h := &handler{s: s, o: o, now: o.Now, log: o.Logger, secret: o.Secret}
	if h.now == nil {
		h.now = time.Now
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.secret == nil {
		h.secret = make([]byte, 32)
		rand.Read(h.secret)
	}
	return h
}

type handler struct {
	s      Store
	o      HandlerOptions
	now    func() time.Time
	log    *slog.Logger
	secret []byte
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if no := admit(r, h.o.Token); no != nil {
		if no.status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="idemadmin"`)
		}
		problem(w, no.status, no.name, no.title, no.detail)
		return
	}
	op := path.Base(r.URL.Path)
	want := http.MethodPost
	if op == PathStats {
		want = http.MethodGet
	}
	switch op {
	case PathGet, PathForget, PathStats, PathPurge:
	default:
		problem(w, http.StatusNotFound, "bad-request", "No such operation", "use get, forget, stats or purge")
		return
	}
	if r.Method != want {
		w.Header().Set("Allow", want)
		problem(w, http.StatusMethodNotAllowed, "bad-request", "Method not allowed", op+" takes "+want)
		return
	}
	switch op {
	case PathStats:
		h.stats(w, r)
	case PathPurge:
		h.purge(w, r)
	default:
		h.record(w, r, op)
	}
}

func (h *handler) stats(w http.ResponseWriter, r *http.Request) {
	top := defaultTopScopes
	if v := r.URL.Query().Get("top"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 10000 {
			problem(w, http.StatusBadRequest, "bad-request", "Bad request", "top must be a number from 0 to 10000")
			return
		}
		top = n
	}
	st, err := h.s.RecordStats(r.Context(), h.now(), top)
	if err != nil {
		h.storeError(w, r, PathStats, err)
		return
	}
	if h.o.Note != "" {
		st.Note = h.o.Note
	}
	writeJSON(w, Shown(st, h.secret))
}

func (h *handler) purge(w http.ResponseWriter, r *http.Request) {
	var req PurgeRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Batch < 0 {
		problem(w, http.StatusBadRequest, "bad-request", "Bad request", "batch must not be negative")
		return
	}
	n, err := PurgeAll(r.Context(), h.s, h.now(), req.Batch)
	attrs := []slog.Attr{slog.Int("purged", n), slog.Int("batch", req.Batch), slog.String("peer", r.RemoteAddr)}
	if err != nil {
		outcome := "store-error"
		if r.Context().Err() != nil {
			outcome = "cancelled" // the caller left: the batches done so far stand
		}
		h.log.LogAttrs(r.Context(), slog.LevelWarn, "idemadmin purge", append(attrs, slog.String("outcome", outcome),
			slog.String("error", err.Error()))...)
		h.storeError(w, r, PathPurge, nil)
		return
	}
	h.log.LogAttrs(r.Context(), slog.LevelInfo, "idemadmin purge", append(attrs, slog.String("outcome", "purged"))...)
	writeJSON(w, PurgeResult{Purged: n})
}

func (h *handler) record(w http.ResponseWriter, r *http.Request, op string) {
	var req RecordRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Key == "" {
		problem(w, http.StatusBadRequest, "bad-request", "Bad request", "key is required")
		return
	}
	id := idem.ID{Scope: req.Scope, Key: req.Key}
	if op == PathGet {
		in, err := h.s.Inspect(r.Context(), id)
		if err != nil {
			h.answerError(w, r, op, id, err)
			return
		}
		in.Expired = in.ExpiredAt(h.now())
		if !req.Body {
			in.Body = nil
		}
		writeJSON(w, in)
		return
	}
	err := h.s.Forget(r.Context(), id, req.Force)
	level, outcome := slog.LevelInfo, "forgotten"
	switch {
	case err == nil && req.Force:
		// A holder that was running lost its key: its completion fails,
		// and IdemkitLeaseLost pages.
		level = slog.LevelWarn
	case err != nil:
		outcome = outcomeOf(err)
	}
	attrs := []slog.Attr{slog.String("scope_hash", ScopeLabel(h.secret, ScopeDigest(id.Scope))),
		slog.String("key_hash", KeyHash(h.secret, id.Key)), slog.Bool("force", req.Force),
		slog.String("peer", r.RemoteAddr), slog.String("outcome", outcome)}
	if outcome == "store-error" {
		level, attrs = slog.LevelWarn, append(attrs, slog.String("error", err.Error()))
	}
	h.log.LogAttrs(r.Context(), level, "idemadmin forget", attrs...)
	if err != nil {
		h.answerError(w, r, op, id, err)
		return
	}
	writeJSON(w, map[string]bool{"forgotten": true})
}

// outcomeOf names a store's answer in an audit line.
func outcomeOf(err error) string {
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return "not-found"
	case errors.Is(err, ErrInFlight):
		return "in-flight"
	case errors.Is(err, ErrChanged):
		return "changed"
	}
	return "store-error"
}

// decode reads the request's body, which must be application/json and
// exactly one JSON object of v's fields, into v.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if !jsonBody(r.Header.Get("Content-Type")) {
		problem(w, http.StatusUnsupportedMediaType, "bad-request", "Unsupported media type",
			"the body must be application/json: one JSON object of the operation's fields ({} for none)")
		return false
	}
	var raw json.RawMessage
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequest))
	err := dec.Decode(&raw)
	if err == nil && dec.Decode(new(json.RawMessage)) != io.EOF {
		err = errors.New("more than one JSON value")
	}
	if err == nil && (len(raw) == 0 || raw[0] != '{') {
		err = errors.New("not a JSON object")
	}
	if err == nil {
		strict := json.NewDecoder(bytes.NewReader(raw))
		strict.DisallowUnknownFields()
		err = strict.Decode(v)
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("an empty body")
		}
		problem(w, http.StatusBadRequest, "bad-request", "Bad request",
			"the body must be exactly one JSON object of the operation's fields ({} for none): "+err.Error())
		return false
	}
	return true
}

// answerError answers err from the store: the named outcomes with problems
// of their own; anything else is logged, and the caller is told only that
// the store failed (its errors may name users, databases, hosts).
func (h *handler) answerError(w http.ResponseWriter, r *http.Request, op string, id idem.ID, err error) {
	switch {
	case errors.Is(err, idem.ErrNotFound):
		p := problemOf(http.StatusNotFound, "not-found", "No record", "the store holds no record of this scope and key")
		p.Location = Locate(h.s, id)
		p.write(w)
	case errors.Is(err, ErrInFlight):
		problem(w, http.StatusConflict, "in-flight", "Record in flight", ErrInFlight.Error())
	case errors.Is(err, ErrChanged):
		problem(w, http.StatusConflict, "changed", "Record changed", ErrChanged.Error())
	default:
		h.storeError(w, r, op, err)
	}
}

// storeError logs err, unless nil (logged already), and answers that the
// store failed.
func (h *handler) storeError(w http.ResponseWriter, r *http.Request, op string, err error) {
	if err != nil {
		h.log.LogAttrs(r.Context(), slog.LevelError, "idemadmin: the store failed", slog.String("op", op),
			slog.String("peer", r.RemoteAddr), slog.String("error", err.Error()))
	}
	problem(w, http.StatusServiceUnavailable, "store-error", "Store failed",
		"the store failed; the serving process's log says why")
}

// adminProblem is a problem of the handler: RFC 9457's members, and where
// the store looked for a record it did not find.
type adminProblem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Location string `json:"location,omitempty"`
}

func problemOf(status int, name, title, detail string) adminProblem {
	return adminProblem{Type: ProblemBase + name, Title: title, Status: status, Detail: detail}
}

func problem(w http.ResponseWriter, status int, name, title, detail string) {
	problemOf(status, name, title, detail).write(w)
}

func (p adminProblem) write(w http.ResponseWriter) {
	b, _ := json.Marshal(p)
	w.Header().Set("Content-Type", exchange.ProblemContentType)
	w.Header().Set("Link", "<"+p.Type+`>; rel="describedby"; type="text/html"`)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	w.Write(b)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		problem(w, http.StatusInternalServerError, "store-error", "Encoding failed", "the answer could not be encoded")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Write(append(b, '\n'))
}

// Client is a Store served by Handler at a base URL, for operating on the
// records of a running process (a SQLite store's records in flight live in
// its memory, and its file is its own to write). Times are the serving
// process's: the now given to RecordStats and Purge is not sent.
type Client struct {
	base  string
	shown string // base without any userinfo, for errors
	token string
	http  *http.Client
}

var _ Store = (*Client)(nil)

// NewClient returns a Client of the Handler mounted at base, such as
// "http://127.0.0.1:9091/idemadmin", over c (nil: http.DefaultClient). A
// token, if not empty, is sent as "Authorization: Bearer <token>" (see
// HandlerOptions.Token). The Client's errors never show base's userinfo.
func NewClient(base, token string, c *http.Client) *Client {
	if c == nil {
		c = http.DefaultClient
	}
	base = strings.TrimSuffix(base, "/")
	shown := base
	if u, err := url.Parse(base); err == nil && u.User != nil {
		u.User = nil
		shown = u.String()
	} else if err != nil {
		shown = "the admin endpoint"
	}
	return &Client{base: base, shown: shown, token: token, http: c}
}

// ErrNoAnswer is the Client's error for a request that got no answer
// (it timed out, the connection broke): whether the operation took effect,
// and how far (a purge may have deleted records), is unknown.
var ErrNoAnswer = errors.New("idemadmin: no answer from the admin endpoint: whether the operation took effect is unknown")

// Inspect implements Store, with the body.
func (c *Client) Inspect(ctx context.Context, id idem.ID) (Info, error) {
	var in Info
	err := c.call(ctx, http.MethodPost, PathGet, RecordRequest{Scope: id.Scope, Key: id.Key, Body: true}, &in)
	return in, err
}

// Forget implements Store.
func (c *Client) Forget(ctx context.Context, id idem.ID, force bool) error {
	return c.call(ctx, http.MethodPost, PathForget, RecordRequest{Scope: id.Scope, Key: id.Key, Force: force}, nil)
}

// RecordStats implements Store, by the serving process's clock. The
// answer is Shown already: its TopScopes are labelled with the serving
// process's secret.
func (c *Client) RecordStats(ctx context.Context, _ time.Time, topScopes int) (Stats, error) {
	var st Stats
	err := c.call(ctx, http.MethodGet, PathStats+"?top="+strconv.Itoa(topScopes), nil, &st)
	return st, err
}

// Purge implements Store: the serving process purges everything expired by
// its clock, in batches of limit. An error wrapping ErrNoAnswer leaves the
// count unknown: the process may have purged records before the answer
// was lost.
func (c *Client) Purge(ctx context.Context, _ time.Time, limit int) (int, error) {
	var res PurgeResult
	err := c.call(ctx, http.MethodPost, PathPurge, PurgeRequest{Batch: limit}, &res)
	return res.Purged, err
}

func (c *Client) call(ctx context.Context, method, op string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+"/"+op, body)
	if err != nil {
		return fmt.Errorf("idemadmin: %s is no URL", c.shown)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w (%s %s: %w)", ErrNoAnswer, method, c.shown+"/"+op, unwrapURLError(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%w (reading the answer of %s: %w)", ErrNoAnswer, c.shown+"/"+op, err)
	}
	if resp.StatusCode != http.StatusOK {
		var p adminProblem
		if json.Unmarshal(b, &p) != nil || !strings.HasPrefix(p.Type, ProblemBase) {
			return fmt.Errorf("idemadmin: %s answered %s, not the admin handler's JSON (is it the records admin listener's URL, with the handler's path?)", c.shown+"/"+op, resp.Status)
		}
		switch strings.TrimPrefix(p.Type, ProblemBase) {
		case "not-found":
			return &NotFoundError{Location: p.Location}
		case "in-flight":
			return ErrInFlight
		case "changed":
			return ErrChanged
		}
		return fmt.Errorf("idemadmin: %s answered %s: %s", c.shown, resp.Status, p.Detail)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("idemadmin: %s answered something else than the admin handler's JSON: %w", c.shown+"/"+op, err)
	}
	return nil
}

// unwrapURLError returns the cause of a *url.Error, whose text would
// repeat the URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
