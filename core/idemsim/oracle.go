package idemsim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
	"time"

	idem "github.com/idemkit/idemkit/core"
)

// The oracle: what the published policy (docs/policy.md) and the store
// contract say, written here a second time, independently of the code
// under test. The simulation judges the Engine by it, never by the
// Engine's own helpers (DefaultFingerprint, Storable, Record.Expired,
// the replay marker): a defect in one of those would otherwise be its own
// judge, and pass.

// replayedMarker is the header the policy adds to every replay.
const replayedMarker = "Idempotent-Replayed"

// extraReplayHeaders are the Engine's Config.ReplayHeaders in the
// simulation: Link and X-Request-Cost are replayed besides Content-Type
// and Location; Set-Cookie is listed too, and the policy never replays it.
var extraReplayHeaders = []string{"Link", "X-Request-Cost", "Set-Cookie"}

// policyReplayed are the response headers a replay carries, as the first
// response carried them: Content-Type, Location, and those the operator
// allows, never Set-Cookie, Authorization or connection-specific ones.
var policyReplayed = []string{"Content-Type", "Location", "Link", "X-Request-Cost"}

// policyStores is the policy's table of what is recorded: 2xx, 3xx and
// 4xx, except 408, 409, 425 and 429.
func policyStores(status int) bool {
	switch {
	case status == 408, status == 409, status == 425, status == 429:
		return false
	case status >= 200 && status <= 299:
		return true
	case status >= 300 && status <= 399:
		return true
	case status >= 400 && status <= 499:
		return true
	}
	return false
}

// policyDefinitive: an answer the policy tells clients not to retry
// (every status but 408, 409, 425, 429 and 5xx).
func policyDefinitive(status int) bool {
	switch status {
	case 408, 409, 425, 429:
		return false
	}
	return status < 500
}

// The store contract's clock rules. A lease held until LeaseUntil has run
// out at that instant (LeaseUntil <= now). ExpiresAt is the first instant
// a record no longer counts: a completed record expires then; one that
// never completed expires then too, once its lease has also run out.

func leaseOver(r idem.Record, now time.Time) bool {
	return !r.LeaseUntil.After(now)
}

func expiredAt(r idem.Record, now time.Time) bool {
	if r.ExpiresAt.After(now) {
		return false
	}
	if r.State == idem.Completed {
		return true
	}
	return leaseOver(r, now)
}

// request is one HTTP request as a client sent it: what the policy
// compares to decide whether two requests are the same.
type request struct {
	method          string
	path            string // the request target: path and query
	contentType     string // "" if none
	contentEncoding string // "" if none

	body []byte

	decoded bool
	kind    bodyKind
	json    jvalue // kindJSON whose body parses
	parts   []formPart
	parsed  bool   // the body parses as its kind says
	sig     string // equal for two requests the policy counts as one (see signature)
}

type bodyKind uint8

const (
	kindRaw bodyKind = iota
	kindJSON
	kindForm
	kindBadJSON // a JSON Content-Type over a body that does not parse as JSON
	kindBadForm // a form Content-Type over a body that does not parse as one
)

// sameRequest is the policy's rule, "What counts as the same request": the
// method, the path with its query, the Content-Encoding, and the body,
// compared as the Content-Type says: by content if it names JSON or a
// form and the body parses as one, else byte for byte. Two requests a
// server could read differently are never the same; two sendings of one
// request always are. (The same bytes that parse as neither, sent once as
// JSON and once as text, are compared byte for byte both times, but are two
// requests: a server answers the first with a decoding error and may take
// the second as it is.)
func sameRequest(a, b *request) bool {
	if a.method != b.method || a.path != b.path {
		return false
	}
	encA, encB := strings.TrimSpace(a.contentEncoding), strings.TrimSpace(b.contentEncoding)
	if encA != encB {
		return false
	}
	if encA != "" {
		return bytes.Equal(a.body, b.body) // compared as sent
	}
	if a.signature() != b.signature() {
		return false
	}
	ka, kb := a.comparedAs(), b.comparedAs()
	switch {
	case ka != kb:
		return false
	case ka == kindJSON:
		return sameJSON(a.json, b.json)
	case ka == kindForm:
		return sameForm(a.parts, b.parts)
	}
	return bytes.Equal(a.body, b.body)
}

// jobMsg is a job as its producer sent it, or as one delivery carries it:
// its name and payload.
type jobMsg struct {
	name    string
	payload []byte
}

// sameJob is the rule of idem.Job: a job is the same as another when its
// name and its payload are, byte for byte; its payload is not decoded, and
// an empty payload is one, however it is given.
func sameJob(a, b *jobMsg) bool {
	return a.name == b.name && bytes.Equal(a.payload, b.payload)
}

// sameWork says whether two attempts carry the same work: two sendings of
// one request, or two deliveries of one job. A job and an HTTP request are
// never the same, even under one key.
func sameWork(a, b *attempt) bool {
	switch {
	case a.msg != nil && b.msg != nil:
		return sameJob(a.msg, b.msg)
	case a.msg == nil && b.msg == nil:
		return sameRequest(a.req, b.req)
	}
	return false
}

// comparedAs says how the body is compared: as JSON or a form when the
// Content-Type names one and the body parses as it, else as raw bytes,
// remembering whether it was meant as JSON or a form.
func (r *request) comparedAs() bodyKind {
	r.decode()
	switch {
	case r.parsed || r.kind == kindRaw:
		return r.kind
	case r.kind == kindJSON:
		return kindBadJSON
	}
	return kindBadForm
}

// signature is a summary of the body that two requests the policy counts
// as one share, cheap to compare: how the body is compared, and its
// leaves (JSON names and values, sorted), parts or bytes. Only a quick
// way to tell most requests apart, it decides nothing by itself.
func (r *request) signature() string {
	r.decode()
	if r.sig != "" {
		return r.sig
	}
	var b strings.Builder
	b.WriteString(strings.TrimSpace(r.contentEncoding))
	b.WriteByte(0)
	switch r.comparedAs() {
	case kindJSON:
		var leaves []string
		var walk func(v jvalue)
		walk = func(v jvalue) {
			switch v.kind {
			case 'o':
				for _, m := range v.members {
					leaves = append(leaves, "k"+m.name)
					walk(m.value)
				}
			case 'a':
				for _, it := range v.items {
					walk(it)
				}
			default:
				leaves = append(leaves, string(v.kind)+v.text)
			}
		}
		walk(r.json)
		slices.Sort(leaves)
		b.WriteString("json")
		for _, l := range leaves {
			fmt.Fprintf(&b, "\x00%d:%s", len(l), l)
		}
	case kindForm:
		b.WriteString("form")
		for _, p := range r.parts {
			fmt.Fprintf(&b, "\x00%d:%s", len(p.content), p.content)
		}
	default:
		fmt.Fprintf(&b, "raw%d\x00", r.comparedAs())
		b.Write(r.body)
	}
	r.sig = b.String()
	return r.sig
}

// decode reads the body as its Content-Type says, once.
func (r *request) decode() {
	if r.decoded {
		return
	}
	r.decoded = true
	mt, params, err := mime.ParseMediaType(r.contentType)
	if err != nil {
		return // raw
	}
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json") && strings.Index(mt, "/") > 0:
		r.kind = kindJSON
		r.json, r.parsed = decodeJSON(r.body)
	case mt == "multipart/form-data" && params["boundary"] != "":
		r.kind = kindForm
		r.parts, r.parsed = decodeForm(r.body, params["boundary"])
	}
}

// jvalue is a JSON value as a decoder sees it, object members in the
// order they were sent.
type jvalue struct {
	kind    byte   // 'o' object, 'a' array, 's' string, 'n' number, 'l' true, false or null
	text    string // a string's decoded value, a number's literal, a literal's name
	items   []jvalue
	members []jmember
}

type jmember struct {
	name  string
	value jvalue
}

// decodeJSON decodes a body with encoding/json's tokenizer, numbers kept
// as written; ok is false unless the body is exactly one valid JSON value.
func decodeJSON(b []byte) (v jvalue, ok bool) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	v, err := decodeJSONValue(d, 0)
	if err != nil {
		return jvalue{}, false
	}
	if _, err := d.Token(); err != io.EOF {
		return jvalue{}, false
	}
	return v, true
}

var errJSON = io.ErrUnexpectedEOF

func decodeJSONValue(d *json.Decoder, depth int) (jvalue, error) {
	if depth > 32 {
		return jvalue{}, errJSON // the simulation never nests this deep
	}
	t, err := d.Token()
	if err != nil {
		return jvalue{}, err
	}
	switch t := t.(type) {
	case json.Delim:
		switch t {
		case '{':
			v := jvalue{kind: 'o'}
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return jvalue{}, err
				}
				name, ok := k.(string)
				if !ok {
					return jvalue{}, errJSON
				}
				m, err := decodeJSONValue(d, depth+1)
				if err != nil {
					return jvalue{}, err
				}
				v.members = append(v.members, jmember{name, m})
			}
			_, err := d.Token() // '}'
			return v, err
		case '[':
			v := jvalue{kind: 'a'}
			for d.More() {
				item, err := decodeJSONValue(d, depth+1)
				if err != nil {
					return jvalue{}, err
				}
				v.items = append(v.items, item)
			}
			_, err := d.Token() // ']'
			return v, err
		}
		return jvalue{}, errJSON
	case string:
		return jvalue{kind: 's', text: t}, nil
	case json.Number:
		return jvalue{kind: 'n', text: string(t)}, nil
	case bool:
		if t {
			return jvalue{kind: 'l', text: "true"}, nil
		}
		return jvalue{kind: 'l', text: "false"}, nil
	case nil:
		return jvalue{kind: 'l', text: "null"}, nil
	}
	return jvalue{}, errJSON
}

// sameJSON compares two JSON values as the policy does: by content, the
// order of object members aside, except that members whose names
// encoding/json may take for one (case-insensitively, with Unicode simple
// folding: strings.EqualFold) keep their relative order, names and values
// included. Numbers are compared as written, strings by what they stand
// for.
func sameJSON(a, b jvalue) bool {
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case 'o':
		return sameMembers(a.members, b.members)
	case 'a':
		return len(a.items) == len(b.items) && slices.EqualFunc(a.items, b.items, sameJSON)
	}
	return a.text == b.text
}

func sameMembers(a, b []jmember) bool {
	if len(a) != len(b) {
		return false
	}
	ga, gb := foldGroups(a), foldGroups(b)
	if len(ga) != len(gb) {
		return false
	}
	used := make([]bool, len(gb))
	for _, x := range ga {
		j := slices.IndexFunc(gb, func(y []jmember) bool { return strings.EqualFold(x[0].name, y[0].name) })
		if j < 0 || used[j] {
			return false
		}
		used[j] = true
		if !slices.EqualFunc(x, gb[j], func(p, q jmember) bool { return p.name == q.name && sameJSON(p.value, q.value) }) {
			return false
		}
	}
	return true
}

// foldGroups gathers members whose names fold together, in their order.
func foldGroups(ms []jmember) [][]jmember {
	var groups [][]jmember
	for _, m := range ms {
		i := slices.IndexFunc(groups, func(g []jmember) bool { return strings.EqualFold(g[0].name, m.name) })
		if i < 0 {
			groups = append(groups, []jmember{m})
			continue
		}
		groups[i] = append(groups[i], m)
	}
	return groups
}

// formPart is one part of a multipart/form-data body.
type formPart struct {
	header  map[string][]string
	content []byte
}

// decodeForm reads a multipart/form-data body part by part, skipping what
// comes before the first part and after the last, as a server does.
func decodeForm(b []byte, boundary string) ([]formPart, bool) {
	r := multipart.NewReader(bytes.NewReader(b), boundary)
	var parts []formPart
	for {
		p, err := r.NextRawPart()
		if err == io.EOF {
			return parts, true
		}
		if err != nil {
			return nil, false
		}
		content, err := io.ReadAll(p)
		if err != nil {
			return nil, false
		}
		parts = append(parts, formPart{header: p.Header, content: content})
	}
}

// sameForm compares two forms part by part, in order: each part's header
// fields and its content. The boundary is not compared.
func sameForm(a, b []formPart) bool {
	return slices.EqualFunc(a, b, func(p, q formPart) bool {
		return maps.EqualFunc(p.header, q.header, slices.Equal) && bytes.Equal(p.content, q.content)
	})
}

// problemOf returns the problem type name (the part of the type URI after
// its last '#') of a problem details response, or "" if resp is not one.
func problemOf(resp *response) string {
	if !resp.problemRead {
		resp.problem, resp.problemRead = readProblem(resp), true
	}
	return resp.problem
}

func readProblem(resp *response) string {
	mt, _, err := mime.ParseMediaType(resp.header.Get("Content-Type"))
	if err != nil || mt != "application/problem+json" {
		return ""
	}
	var p struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	if json.Unmarshal(resp.body, &p) != nil || p.Status != resp.status {
		return "(malformed)"
	}
	return p.Type[strings.LastIndexByte(p.Type, '#')+1:]
}

// sameReplayedHeader reports whether a replay carries the replayed headers
// of the response it repeats, with all their values, and returns the
// first header that differs.
func sameReplayedHeader(replay, first http.Header) (string, bool) {
	for _, name := range policyReplayed {
		if !slices.Equal(replay[name], first[name]) {
			return name, false
		}
	}
	for _, name := range sortedNames(replay) {
		if name != replayedMarker && !slices.Contains(policyReplayed, name) {
			return name, false
		}
	}
	return "", true
}
