package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// replayedHeader is the replay marker most implementations send (Stripe's
// spelling, and idemkit's).
const replayedHeader = "Idempotent-Replayed"

// maxResponseBody bounds what is kept of one answer: enough for any API
// object, small enough that a broken target cannot exhaust memory.
const maxResponseBody = 1 << 20

// maxBodyRead bounds what is read of one answer. Past maxResponseBody the
// bytes are only hashed, so that long answers are still compared whole;
// two answers longer than this that agree as far as it reads cannot be
// compared. A variable so that tests can lower it.
var maxBodyRead int64 = 64 << 20

// slowSettle is how long the concurrent retry waits after the slow first
// request was sent, so that the target has taken the first request in hand.
const slowSettle = 100 * time.Millisecond

// target is one endpoint under test and everything needed to talk to it.
type target struct {
	name      string      // method and URL, as reports show it
	method    string      // POST, PATCH, ...
	url       string      // absolute URL
	header    http.Header // sent on every request (identity 1)
	tenant2   http.Header // replaces same-named headers for identity 2; nil without -tenant2
	body      string      // template: {{unique}} becomes a fresh value per logical request
	otherBody string      // another payload, for templates without {{unique}} (OpenAPI examples)
	keyHeader string      // the key's field name
	slowHdr   http.Header // added to make the request slow (-slow-header)
	slowBody  string      // template of a slow request (-slow-body)
	failHdr   http.Header // added to make the request fail with a 5xx (-fail-header)
}

// placeholder is replaced by a fresh value per logical request.
const placeholder = "{{unique}}"

func (t *target) hasUnique() bool { return strings.Contains(t.body, placeholder) }

func (t *target) hasSlow() bool { return t.slowHdr != nil || t.slowBody != "" }

// render fills a body template.
func render(tmpl, unique string) []byte {
	if tmpl == "" {
		return nil
	}
	return []byte(strings.ReplaceAll(tmpl, placeholder, unique))
}

// call is one request to send.
type call struct {
	method  string
	url     string
	keys    []string // the key's field lines as sent; nil sends none
	body    []byte   // nil sends none
	tenant2 bool     // as the second identity
	extra   http.Header
}

// roundTrip is one request and what came back.
type roundTrip struct {
	call   call
	status int
	header http.Header
	body   []byte // the answer's first maxResponseBody bytes
	size   int64  // bytes read of the answer
	digest [sha256.Size]byte
	whole  bool      // the answer ended within maxBodyRead: size and digest are the whole answer's
	err    error     // no whole answer although the request was sent
	start  time.Time // just before the request left
	got    time.Time // when the answer's header arrived
}

func (x *roundTrip) ok() bool { return x.err == nil && x.status >= 200 && x.status < 300 }

func (x *roundTrip) is(status int) bool { return x.err == nil && x.status == status }

// is5xx reports a server-side failure: a 5xx, or no whole answer at all
// (a dropped connection, a timeout).
func (x *roundTrip) is5xx() bool { return x.err != nil || x.status >= 500 }

func (x *roundTrip) replayed() bool {
	return x.err == nil && strings.EqualFold(strings.TrimSpace(x.header.Get(replayedHeader)), "true")
}

// What an answer proves is read from the answer itself, never from the
// replay marker: a server may send Idempotent-Replayed: true on an answer
// it produced by running the request again.

// sameBody compares x's body with y's. exact means the same bytes
// (compared whole, by digest, past what is kept); same without exact means
// the same JSON value in other bytes (a store that re-encodes JSON). known
// is false when the bodies cannot be compared: both are longer than
// idemcheck reads and agree as far as it reads.
func sameBody(x, y *roundTrip) (same, exact, known bool) {
	switch {
	case x.whole && y.whole:
		if x.size == y.size && x.digest == y.digest {
			return true, true, true
		}
		if x.kept() && y.kept() && jsonEqual(x.body, y.body) {
			return true, false, true
		}
		return false, false, true
	case x.whole != y.whole:
		return false, false, true // one ended within the bound, the other did not
	case x.digest != y.digest:
		return false, false, true // both digests cover the same number of bytes
	}
	return false, false, false
}

// undecidable reports whether x and y are answers whose bodies cannot be
// compared.
func undecidable(x, y *roundTrip) bool {
	_, _, known := sameBody(x, y)
	return x.err == nil && y.err == nil && !known
}

// kept reports whether x.body is the whole answer.
func (x *roundTrip) kept() bool { return x.whole && int64(len(x.body)) == x.size }

// differsFrom reports proof that x is not the answer y got: another body,
// or another Location.
func (x *roundTrip) differsFrom(y *roundTrip) bool {
	if x.err != nil || y.err != nil {
		return false
	}
	if lx, ly := x.header.Get("Location"), y.header.Get("Location"); lx != "" && ly != "" && lx != ly {
		return true
	}
	same, _, known := sameBody(x, y)
	return known && !same
}

// sameAnswer reports whether x carries y's answer: the same status and
// body, and no other Location.
func (x *roundTrip) sameAnswer(y *roundTrip) bool {
	return x.err == nil && y.err == nil && x.status == y.status && x.carries(y)
}

// carries reports whether x's body is y's (by bytes or as JSON) and its
// Location is not another.
func (x *roundTrip) carries(y *roundTrip) bool {
	same, _, known := sameBody(x, y)
	return known && same && !x.differsFrom(y)
}

// replayOf reports whether x, sent with first's key, got first's answer:
// its body, with its status (a success may come back as another 2xx).
// Where every request gets the same answer this cannot be told from a
// second execution; the runner's blind reason says so.
func (x *roundTrip) replayOf(first *roundTrip) bool {
	return x.err == nil && first.err == nil && (x.status == first.status || x.ok() && first.ok()) && x.carries(first)
}

// ranAgain reports whether x, a retry of first with the same key, shows a
// second execution: a success whose answer differs from first's, whatever
// replay marker it carries.
func (x *roundTrip) ranAgain(first *roundTrip) bool { return x.ok() && x.differsFrom(first) }

// contrast describes how x's body differs from y's, for report details.
func contrast(x, y *roundTrip) string {
	n := min(len(x.body), len(y.body))
	i := 0
	for i < n && x.body[i] == y.body[i] {
		i++
	}
	if i == n && len(x.body) == len(y.body) && (!x.kept() || !y.kept()) {
		return fmt.Sprintf("the same first %d bytes, other bytes after them (%d and %d bytes in all)", n, x.size, y.size)
	}
	from := max(0, i-24)
	at := func(b []byte) string {
		s := snippet(b[from:])
		if from > 0 {
			s = "…" + s
		}
		return s
	}
	return fmt.Sprintf("%q, first %q", at(x.body), at(y.body))
}

// jsonEqual reports whether a and b are JSON texts of one value. Numbers
// are compared by value, exactly: 1.0 and 1 are one number, two ids that
// differ in their last digit are not.
func jsonEqual(a, b []byte) bool {
	va, ok := decodeJSON(a)
	if !ok {
		return false
	}
	vb, ok := decodeJSON(b)
	return ok && sameJSON(va, vb)
}

func decodeJSON(b []byte) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false // trailing data
	}
	return v, true
}

func sameJSON(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !sameJSON(va, vb) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameJSON(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		if a == b {
			return true
		}
		ra, oka := new(big.Rat).SetString(string(a))
		rb, okb := new(big.Rat).SetString(string(b))
		return oka && okb && ra.Cmp(rb) == 0
	default:
		return a == b // string, bool, nil
	}
}

// String describes the answer in a few words, for report details.
func (x *roundTrip) String() string {
	if x.err != nil {
		return "no answer (" + x.err.Error() + ")"
	}
	s := fmt.Sprint(x.status)
	if x.replayed() {
		s += ", marked replayed"
	}
	return s
}

// snippet is the start of a body, safe to print on one line.
func snippet(b []byte) string {
	const max = 80
	s := string(b)
	if len(s) > max {
		s = s[:max] + "…"
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "?")
	}
	return strings.Join(strings.Fields(s), " ")
}

// errUnreachable marks a failure to deliver a request at all: the run stops
// and idemcheck exits with status 2.
var errUnreachable = errors.New("target unreachable")

// runner sends one target's requests and records what came back.
type runner struct {
	t       *target
	client  *http.Client
	timeout time.Duration
	prefix  string // random per run: keys and unique values never repeat across runs
	seq     *int   // shared by the run's targets, so no key is used on two of them

	mu   sync.Mutex
	sent int

	abort    error      // errUnreachable or a usage problem found on the way: stops the run
	stop     string     // a finding that makes the remaining cases meaningless
	problems []errorAns // idempotency errors seen, for the problem-details cases
	markers  int        // answers marked as replays

	// Found by the replay case, they make the cases that compare a retry
	// with its first answer meaningless (see moot).
	noKeys string // every retry ran again: the target keeps no keys
	blind  string // different requests got the same answer: a replay cannot be told from a second execution
}

// moot is why the cases that ask how the target reads a key cannot be
// judged, or "". replay/once and the diagnosis say it in full.
func (r *runner) moot() string {
	switch {
	case r.noKeys != "":
		return "not judged: the target does not appear to implement idempotency keys (see replay/once)"
	case r.blind != "":
		return "cannot tell a replay from a second execution (see replay/once)"
	}
	return ""
}

// diagnosis is what the run found about the target as a whole, or "".
func (r *runner) diagnosis() string {
	switch {
	case r.noKeys != "":
		return r.noKeys
	case r.blind != "" && len(r.problems) == 0 && r.markers == 0:
		return "the target shows no sign of implementing idempotency keys: it refused no key, answered no 409 or 422 and marked no answer as a replay; and " + r.blind
	}
	return r.blind
}

// errorAns is an idempotency error answer and the case that provoked it.
type errorAns struct {
	from string
	x    *roundTrip
}

func newRunner(t *target, client *http.Client, timeout time.Duration, prefix string, seq *int) *runner {
	return &runner{t: t, client: client, timeout: timeout, prefix: prefix, seq: seq}
}

// newPrefix returns a random run prefix.
func newPrefix() string {
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}

// logical is one logical request: its key and its unique value.
type logical struct {
	key    string // the key itself, unquoted
	unique string
}

func (r *runner) fresh() logical {
	*r.seq++
	// Fixed-width numbers: no unique value is a prefix of another, so
	// finding one in an answer means that request's data.
	n := *r.seq
	return logical{key: fmt.Sprintf("idemcheck-%s-%04d", r.prefix, n), unique: fmt.Sprintf("ic%s%04d", r.prefix, n)}
}

// quote spells a key as an sf-string; keys made by fresh need no escapes.
func quote(k string) string { return `"` + k + `"` }

// post is the target's request for l, with the key spelled as field.
func (r *runner) post(l logical, field ...string) call {
	return call{method: r.t.method, url: r.t.url, keys: field, body: render(r.t.body, l.unique)}
}

// std is the target's request for l with the key as an sf-string.
func (r *runner) std(l logical) call { return r.post(l, quote(l.key)) }

func (r *runner) setAbort(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.abort == nil {
		r.abort = err
	}
}

func (r *runner) aborted() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.abort
}

func (r *runner) requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent
}

// do sends c and reads the answer. wrote, if not nil, is called once the
// request has been written (or has failed).
func (r *runner) do(c call, wrote func()) *roundTrip {
	r.mu.Lock()
	r.sent++
	r.mu.Unlock()
	x := &roundTrip{call: c}
	var once sync.Once
	signal := func() {
		if wrote != nil {
			once.Do(wrote)
		}
	}
	defer signal()

	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	var written bool
	var wmu sync.Mutex
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) {
			wmu.Lock()
			written = true
			wmu.Unlock()
			signal()
		},
	})
	var body io.Reader
	if c.body != nil {
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, c.url, body)
	if err != nil {
		x.err = err
		r.setAbort(fmt.Errorf("%w: %v", errUnreachable, err))
		return x
	}
	for name, values := range r.t.header {
		req.Header[name] = append([]string(nil), values...)
	}
	if c.tenant2 {
		for name, values := range r.t.tenant2 {
			req.Header[name] = append([]string(nil), values...)
		}
	}
	for name, values := range c.extra {
		req.Header[name] = append([]string(nil), values...)
	}
	if c.body == nil {
		req.Header.Del("Content-Type")
	}
	if c.keys != nil {
		req.Header[r.t.keyHeader] = c.keys
	}
	x.start = time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		wmu.Lock()
		sent := written
		wmu.Unlock()
		x.err = shortErr(err)
		if !sent {
			// Nothing reached the target: it is down or the URL is wrong.
			r.setAbort(fmt.Errorf("%w: %v", errUnreachable, err))
		}
		return x
	}
	defer resp.Body.Close()
	x.got = time.Now()
	x.status = resp.StatusCode
	x.header = resp.Header
	if err := x.readBody(resp.Body); err != nil {
		x.err = shortErr(err)
	}
	if x.replayed() {
		r.mu.Lock()
		r.markers++
		r.mu.Unlock()
	}
	return x
}

// readBody reads the answer's body: it keeps the first maxResponseBody
// bytes and hashes up to maxBodyRead, so that no comparison ever rests on
// a body cut short.
func (x *roundTrip) readBody(body io.Reader) error {
	h := sha256.New()
	k := &keeper{max: maxResponseBody}
	n, err := io.Copy(io.MultiWriter(h, k), io.LimitReader(body, maxBodyRead+1))
	x.body, x.size, x.whole = k.buf, n, n <= maxBodyRead
	h.Sum(x.digest[:0])
	return err
}

// keeper keeps the first max bytes written to it and drops the rest.
type keeper struct {
	buf []byte
	max int
}

func (k *keeper) Write(p []byte) (int, error) {
	if room := k.max - len(k.buf); room > 0 {
		k.buf = append(k.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// shortErr drops the method and URL Go puts in front of transport errors:
// the report already says which request it was.
func shortErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// pair sends first and, once it has been written (and, for a slow request,
// a moment later), second; it returns both answers.
func (r *runner) pair(first, second call, settle time.Duration) (a, b *roundTrip) {
	wrote := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		a = r.do(first, func() { close(wrote) })
	}()
	<-wrote
	if settle > 0 {
		select {
		case <-done:
		case <-time.After(settle):
		}
	}
	b = r.do(second, nil)
	<-done
	return a, b
}

// noteError keeps an idempotency error answer for the problem-details cases.
func (r *runner) noteError(from string, x *roundTrip) {
	if x.err == nil && (x.status == 400 || x.status == 409 || x.status == 422) {
		r.problems = append(r.problems, errorAns{from: from, x: x})
	}
}

// newClient returns the HTTP client idemcheck uses: it never follows a
// redirect (idemcheck talks to the target given and nothing else).
func newClient() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 8
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// budget is the most requests the probes runnable against t send.
func budget(t *target) int {
	n := 0
	for _, p := range probes {
		if p.needs(t) == "" {
			n += p.max
		}
	}
	return n
}

// run runs every probe against the target, in order, and returns the
// results; it stops early if the target cannot be reached (see aborted).
// step is called before each probe.
func (r *runner) run(step func(i, n int, name string)) []result {
	v := newVerdicts()
	for i, p := range probes {
		step(i, len(probes), p.name)
		reason := p.needs(r.t)
		if reason == "" && r.stop != "" {
			reason = r.stop
		}
		if reason != "" {
			for _, id := range p.rules {
				v.skip(id, "%s", reason)
			}
			continue
		}
		if p.keyed && r.moot() != "" {
			for _, id := range p.rules {
				v.skip(id, "%s", r.moot())
			}
			continue
		}
		p.run(r, v)
		if r.aborted() != nil {
			return nil
		}
		if r.stop != "" {
			for _, id := range p.rules {
				v.skip(id, "%s", r.stop)
			}
		}
	}
	return v.results()
}
