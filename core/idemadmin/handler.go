package idemadmin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	idem "github.com/idemkit/idemkit/core"
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

// ProblemBase prefixes the names of the handler's problem types: not-found,
// in-flight, changed, bad-request and store-error.
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

// PurgeRequest is the body of a purge request; a Batch of 0 is
// DefaultPurgeBatch.
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
}

// maxRequest bounds a request's body: a key is at most 255 bytes, a scope
// whatever a tenant function returns, but not megabytes.
const maxRequest = 64 << 10

// defaultTopScopes is the number of scopes stats returns without ?top=.
const defaultTopScopes = 10

// Handler serves s's operations as JSON, for an admin listener only: it
// can delete records and has no authentication of its own. Mount it under
// a path of its own, such as "/idemadmin/": it answers by the last segment
// of the path.
func Handler(s Store, o HandlerOptions) http.Handler {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		ctx := r.Context()
		switch op {
		case PathStats:
			top := defaultTopScopes
			if v := r.URL.Query().Get("top"); v != "" {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 || n > 10000 {
					problem(w, http.StatusBadRequest, "bad-request", "Bad request", "top must be a number from 0 to 10000")
					return
				}
				top = n
			}
			st, err := s.RecordStats(ctx, now(), top)
			if err != nil {
				storeError(w, err)
				return
			}
			if o.Note != "" {
				st.Note = o.Note
			}
			writeJSON(w, st)
		case PathPurge:
			var req PurgeRequest
			if !decode(w, r, &req) {
				return
			}
			if req.Batch < 0 {
				problem(w, http.StatusBadRequest, "bad-request", "Bad request", "batch must not be negative")
				return
			}
			n, err := PurgeAll(ctx, s, now(), req.Batch)
			if err != nil {
				storeError(w, err)
				return
			}
			writeJSON(w, PurgeResult{Purged: n})
		default:
			var req RecordRequest
			if !decode(w, r, &req) {
				return
			}
			if req.Key == "" {
				problem(w, http.StatusBadRequest, "bad-request", "Bad request", "key is required")
				return
			}
			id := idem.ID{Scope: req.Scope, Key: req.Key}
			if op == PathForget {
				if err := s.Forget(ctx, id, req.Force); err != nil {
					storeError(w, err)
					return
				}
				writeJSON(w, map[string]bool{"forgotten": true})
				return
			}
			in, err := s.Inspect(ctx, id)
			if err != nil {
				storeError(w, err)
				return
			}
			in.Expired = in.ExpiredAt(now())
			if !req.Body {
				in.Body = nil
			}
			writeJSON(w, in)
		}
	})
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxRequest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		problem(w, http.StatusBadRequest, "bad-request", "Bad request", "the body must be one JSON object of the operation's fields: "+err.Error())
		return false
	}
	return true
}

// storeError answers err from the store: the named outcomes with problems
// of their own, anything else as the store's failure. Its text names no
// scope or key: the stores' errors never do.
func storeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, idem.ErrNotFound):
		problem(w, http.StatusNotFound, "not-found", "No record", "the store holds no record of this scope and key")
	case errors.Is(err, ErrInFlight):
		problem(w, http.StatusConflict, "in-flight", "Record in flight", ErrInFlight.Error())
	case errors.Is(err, ErrChanged):
		problem(w, http.StatusConflict, "changed", "Record changed", ErrChanged.Error())
	default:
		problem(w, http.StatusServiceUnavailable, "store-error", "Store failed", err.Error())
	}
}

func problem(w http.ResponseWriter, status int, name, title, detail string) {
	p := idem.Problem{Type: ProblemBase + name, Title: title, Status: status, Detail: detail}.Response()
	for _, f := range p.Header {
		w.Header()[f.Name] = f.Values
	}
	w.WriteHeader(status)
	w.Write(p.Body)
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		problem(w, http.StatusInternalServerError, "store-error", "Encoding failed", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(append(b, '\n'))
}

// Client is a Store served by Handler at a base URL, for operating on the
// records of a running process (a SQLite store's records in flight live in
// its memory, and its file is its own to write). Times are the serving
// process's: the now given to RecordStats and Purge is not sent.
type Client struct {
	base string
	http *http.Client
}

var _ Store = (*Client)(nil)

// NewClient returns a Client of the Handler mounted at base, such as
// "http://127.0.0.1:9090/idemadmin", over c (nil: http.DefaultClient).
func NewClient(base string, c *http.Client) *Client {
	if c == nil {
		c = http.DefaultClient
	}
	return &Client{base: strings.TrimSuffix(base, "/"), http: c}
}

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

// RecordStats implements Store, by the serving process's clock.
func (c *Client) RecordStats(ctx context.Context, _ time.Time, topScopes int) (Stats, error) {
	var st Stats
	err := c.call(ctx, http.MethodGet, PathStats+"?top="+strconv.Itoa(topScopes), nil, &st)
	return st, err
}

// Purge implements Store: the serving process purges everything expired by
// its clock, in batches of limit.
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
		return fmt.Errorf("idemadmin: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("idemadmin: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("idemadmin: read the answer of %s: %w", c.base, err)
	}
	if resp.StatusCode != http.StatusOK {
		var p struct{ Type, Detail string }
		if json.Unmarshal(b, &p) != nil || !strings.HasPrefix(p.Type, ProblemBase) {
			return fmt.Errorf("idemadmin: %s answered %s, not the admin handler's JSON (is it the admin listener's URL, with the handler's path?)", c.base+"/"+op, resp.Status)
		}
		switch strings.TrimPrefix(p.Type, ProblemBase) {
		case "not-found":
			return idem.ErrNotFound
		case "in-flight":
			return ErrInFlight
		case "changed":
			return ErrChanged
		}
		return fmt.Errorf("idemadmin: %s: %s", resp.Status, p.Detail)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("idemadmin: %s answered something else than the admin handler's JSON: %w", c.base+"/"+op, err)
	}
	return nil
}
