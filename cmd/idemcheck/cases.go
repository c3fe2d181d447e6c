package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// The sections cited are those of draft-ietf-httpapi-idempotency-key-header-07:
// 2.1 syntax, 2.4 fingerprint, 2.6 enforcement, 2.7 error handling, 5
// security. A level follows the draft's own word where it has one. The
// draft words even the retry's answer as SHOULD; idemcheck's floor is MUST
// for what no implementation of the field may do: run a request twice for
// one key, or give a request another request's or identity's answer.
// "common practice" and "idemkit policy" mark behaviour the draft does not
// spell out. docs/idemcheck.md gives, per case, the sentence it rests on;
// a test keeps that table and this one the same.
const (
	practice = "common practice"
	policy   = "idemkit policy"
)

// rules are the report's lines, in report order.
var rules = []rule{
	{"key/sf-string", must, "2.1", "a key sent as an sf-string is accepted"},
	{"replay/once", must, "2.6", "a retry with the same key and payload does not run again"},
	{"replay/status", should, "2.6", "the retry gets the first answer's status"},
	{"replay/body", should, "2.6", "the retry gets the first answer's body, byte for byte"},
	{"replay/headers", should, practice, "the retry gets the first answer's Content-Type and Location"},
	{"replay/marker", may, practice, "a replay, and only a replay, is marked Idempotent-Replayed: true"},
	{"replay/own-response", must, "2.6", "each key's replay is its own answer, never another request's"},
	{"key/missing", should, "2.7", "a request without a key is refused with 400"},
	{"key/bare-token", should, "2.1", `a bare key (k) is the key "k", or is refused with 400`},
	{"key/parameters", should, "2.1", `parameters ("k";v=1) do not change the key, or are refused with 400`},
	{"key/escapes", should, "2.1", `a key with escapes (\" and \\) works as a key`},
	{"key/two-lines", should, "2.1", "two key field lines are refused with 400"},
	{"key/list", should, "2.1", `a list of keys ("a", "b") is refused with 400`},
	{"key/malformed", should, "2.1", "a malformed sf-string (bad escape, unterminated, trailing junk) is refused with 400"},
	{"key/control-chars", should, "2.1", "a key with a control character (tab) is refused with 400"},
	{"key/non-ascii", should, "2.1", "a key with non-ASCII bytes is refused with 400"},
	{"key/empty", should, "5", `an empty key ("") is refused with 400`},
	{"key/over-long", should, "5", "a 1,024-character key is refused with 400, or kept whole"},
	{"payload/changed", should, "2.7", "a used key with another payload neither runs again nor gets the first answer"},
	{"payload/changed-422", should, "2.7", "a used key with another payload is refused with 422"},
	{"payload/reordered-json", may, "2.4", "reordered JSON members and other whitespace are the same payload"},
	{"payload/query", may, policy, "a used key on the URL with another query string is refused with 422"},
	{"concurrent/409", should, "2.6, 2.7", "a retry while the first request runs gets 409 at once, is neither run nor queued"},
	{"concurrent/once", must, "2.6", "of two concurrent requests with one key, one runs"},
	{"concurrent/retry-after", may, practice, "the 409 carries Retry-After"},
	{"concurrent/then-replay", should, "2.6", "once the first request finished, a retry gets its answer (the key is not stuck)"},
	{"failure/not-replayed", may, policy, "a 5xx answer is not replayed: a retry runs again"},
	{"failure/released", should, "2.6, 2.7", "after a 5xx the key is free: a retry is not refused with 409"},
	{"tenant/isolated", must, "5", "no identity gets another identity's answer"},
	{"tenant/no-leak", should, "5", "another identity's use of a key is not revealed (no 409 or 422)"},
	{"problem/json", should, "2.7", "idempotency errors are RFC 9457 problem details (application/problem+json)"},
	{"problem/docs-link", should, "2.7", "idempotency errors point to documentation (problem type URI or Link)"},
	{"problem/link-header", may, "2.7", `idempotency errors carry Link: <...>; rel="describedby"`},
	{"safe/untouched", should, practice, "a GET with a key is untouched: same answer, nothing recorded"},
}

// probe is a group of requests that decides some rules.
type probe struct {
	name  string
	rules []string
	max   int                  // requests it sends at most
	needs func(*target) string // why it cannot run against this target; "" if it can
	run   func(*runner, *verdicts)

	// keyed probes ask how the target reads a key, by comparing a retry
	// with its first answer: they are not run when the replay case found
	// that the target keeps no keys, or that its answers cannot tell a
	// replay from a second execution.
	keyed bool
}

func always(*target) string { return "" }

var probes = []probe{
	{"replay", []string{"key/sf-string", "replay/once", "replay/status", "replay/body", "replay/headers", "replay/marker", "replay/own-response"}, 5, always, probeReplay, false},
	{"missing key", []string{"key/missing"}, 1, always, probeMissing, false},
	{"bare key", []string{"key/bare-token"}, 2, always, probeBare, true},
	{"key parameters", []string{"key/parameters"}, 2, always, probeParams, true},
	{"key escapes", []string{"key/escapes"}, 2, always, probeEscapes, true},
	{"two key lines", []string{"key/two-lines"}, 2, always, probeTwoLines, false},
	{"key list", []string{"key/list"}, 1, always, probeList, false},
	{"malformed keys", []string{"key/malformed"}, 3, always, probeMalformed, false},
	{"control characters", []string{"key/control-chars"}, 1, always, probeControl, false},
	{"non-ASCII key", []string{"key/non-ascii"}, 1, always, probeNonASCII, false},
	{"empty key", []string{"key/empty"}, 1, always, probeEmpty, false},
	{"over-long key", []string{"key/over-long"}, 3, always, probeOverLong, true},
	{"changed payload", []string{"payload/changed", "payload/changed-422"}, 2, needsOtherPayload, probeChanged, true},
	{"reordered JSON", []string{"payload/reordered-json"}, 2, needsReorderable, probeReordered, true},
	{"query string", []string{"payload/query"}, 2, always, probeQuery, true},
	{"concurrent retry", []string{"concurrent/409", "concurrent/once", "concurrent/retry-after", "concurrent/then-replay"}, 3, always, probeConcurrent, false},
	{"5xx", []string{"failure/not-replayed", "failure/released"}, 2, needsFail, probeFailure, false},
	{"tenant isolation", []string{"tenant/isolated", "tenant/no-leak"}, 4, needsTenant2, probeTenant, true},
	{"safe methods", []string{"safe/untouched"}, 3, always, probeSafe, false},
	{"problem details", []string{"problem/json", "problem/docs-link", "problem/link-header"}, 0, always, probeProblems, false},
}

func needsOtherPayload(t *target) string {
	if t.hasUnique() || t.otherBody != "" {
		return ""
	}
	return "needs " + placeholder + " in -d, to make another payload"
}

func needsReorderable(t *target) string {
	if _, ok := reorderJSON(render(t.body, "x")); ok {
		return ""
	}
	return "needs a JSON object body with two members or more"
}

func needsFail(t *target) string {
	if t.failHdr != nil {
		return ""
	}
	return "needs -fail-header, a header that makes the target fail with a 5xx"
}

func needsTenant2(t *target) string {
	if t.tenant2 != nil {
		return ""
	}
	return "needs -tenant2, the headers of a second identity"
}

// probeReplay sends two requests with their own keys, then retries both.
// It also finds what the later cases need to know: whether the target
// keeps keys at all (noKeys), and whether its answers tell one request from
// another (blind).
func probeReplay(r *runner, v *verdicts) {
	l1 := r.fresh()
	a1 := r.do(r.std(l1), nil)
	if r.aborted() != nil {
		return
	}
	if !a1.ok() {
		baselineFailed(r, v, a1)
		return
	}
	v.pass("key/sf-string", "accepted (%s)", a1)
	l2 := r.fresh()
	a2 := r.do(r.std(l2), nil)
	r1 := r.do(r.std(l1), nil)
	r2 := r.do(r.std(l2), nil)

	switch {
	case !a2.ok():
		r.blind = fmt.Sprintf("a second request with a key of its own got %s, so there are no two answers to tell apart", a2)
	case !a1.differsFrom(a2):
		r.blind = fmt.Sprintf("two requests with keys of their own got the same answer (%d %q), so a replay cannot be told from a second execution: check an endpoint whose answer shows which request it is for (an id, or %s in -d echoed back)",
			a1.status, snippet(a1.body), placeholder)
	}

	if r.blind == "" && (undecidable(a1, a2) || undecidable(r1, a1) || undecidable(r2, a2)) {
		r.blind = fmt.Sprintf("the answers are longer than the %d MiB idemcheck reads and agree as far as it reads, so a replay cannot be told from a second execution", maxBodyRead>>20)
	}

	pairs := []struct{ first, retry *roundTrip }{{a1, r1}, {a2, r2}}
	var reran []string
	marked := 0
	for _, p := range pairs {
		if p.first.ok() && p.retry.ranAgain(p.first) {
			reran = append(reran, rerun(p.retry, p.first))
			if p.retry.replayed() {
				marked++
			}
		}
	}
	switch {
	case len(reran) == len(pairs):
		r.noKeys = "the target does not appear to implement idempotency keys: both retries with a used key and the same payload ran again, and neither got its first answer"
		if marked > 0 {
			r.noKeys += fmt.Sprintf(" (%d of them marked %s: true all the same)", marked, replayedHeader)
		}
		v.breach("replay/once", "%s; %s", r.noKeys, reran[0])
	case len(reran) > 0:
		v.breach("replay/once", "a retry ran again: %s", reran[0])
	case r.blind != "":
		v.skip("replay/once", "cannot tell: %s", r.blind)
	case r1.replayOf(a1) && r2.replayOf(a2):
		v.pass("replay/once", "each retry got its first answer")
	default:
		v.pass("replay/once", "no retry ran again (they got %s and %s)", r1, r2)
	}

	switch {
	case r1.err != nil || r1.status != a1.status:
		v.fail("replay/status", "the first request got %d, its retry %s", a1.status, r1)
	case r.blind != "":
		v.skip("replay/status", "%s", r.moot())
	default:
		v.pass("replay/status", "%d both times", a1.status)
	}

	switch same, exact, known := sameBody(r1, a1); {
	case r1.err != nil:
		v.fail("replay/body", "the retry got %s", r1)
	case !known:
		v.skip("replay/body", "cannot compare: both answers are longer than the %d MiB idemcheck reads, and agree as far as it reads", maxBodyRead>>20)
	case exact && r.blind != "":
		v.skip("replay/body", "%s", r.moot())
	case exact:
		v.pass("replay/body", "byte-identical (%d bytes)", a1.size)
	case same:
		v.fail("replay/body", "the same JSON value, but not byte for byte: %s", contrast(r1, a1))
	default:
		v.fail("replay/body", "the retry's body differs: %s", contrast(r1, a1))
	}

	switch {
	case r1.err != nil:
		v.fail("replay/headers", "the retry got %s", r1)
	case r.blind != "":
		v.skip("replay/headers", "%s", r.moot())
	default:
		for _, h := range []string{"Content-Type", "Location"} {
			if got, want := r1.header.Get(h), a1.header.Get(h); got != want {
				v.fail("replay/headers", "%s %q on the retry, %q on the first answer", h, got, want)
			}
		}
		v.pass("replay/headers", "the same Content-Type and Location")
	}

	switch {
	case a1.replayed() || a2.replayed():
		v.fail("replay/marker", "the answer to a new key was marked %s: true: the marker does not mean a replay", replayedHeader)
	case marked > 0:
		v.fail("replay/marker", "%s: true on a retry that ran again: the marker does not mean a replay", replayedHeader)
	case r1.replayed():
		v.pass("replay/marker", "%s: true on the retry, not on the first answer", replayedHeader)
	default:
		v.fail("replay/marker", "no %s: true on the retry", replayedHeader)
	}

	switch {
	case !a2.ok():
		v.skip("replay/own-response", "the second request got %s", a2)
	case len(reran) == len(pairs):
		v.skip("replay/own-response", "both retries ran again: no answer was replayed, so none can be another request's")
	case r.blind != "":
		v.skip("replay/own-response", "%s", r.moot())
	default:
		if tookOther(r1, a1, a2, l2.unique) {
			v.breach("replay/own-response", "the retry of the first key got the second request's answer: %q", snippet(r1.body))
		}
		if tookOther(r2, a2, a1, l1.unique) {
			v.breach("replay/own-response", "the retry of the second key got the first request's answer: %q", snippet(r2.body))
		}
		v.pass("replay/own-response", "each retry got its own key's answer")
	}
}

// rerun describes a retry that ran again, for report details.
func rerun(retry, first *roundTrip) string {
	s := fmt.Sprintf("a retry of a %d got %s with another answer", first.status, retry)
	if retry.replayed() {
		s = fmt.Sprintf("a retry of a %d got %d with another answer although marked %s: true", first.status, retry.status, replayedHeader)
	}
	if lr, lf := retry.header.Get("Location"), first.header.Get("Location"); lr != lf && lr != "" && lf != "" {
		return fmt.Sprintf("%s (Location %s, first %s)", s, lr, lf)
	}
	return s + " (" + contrast(retry, first) + ")"
}

// tookOther reports whether retry, a retry of own, carries other's answer:
// other's body, or other's unique value that own's answer did not contain.
func tookOther(retry, own, other *roundTrip, otherUnique string) bool {
	if retry.err != nil {
		return false
	}
	if retry.carries(other) {
		return true
	}
	u := []byte(otherUnique)
	return bytes.Contains(retry.body, u) && !bytes.Contains(own.body, u)
}

// baselineFailed handles a first request that did not succeed: either the
// target refuses the draft's key syntax (a finding), or the request itself
// is wrong (a usage error, exit status 2).
func baselineFailed(r *runner, v *verdicts, a *roundTrip) {
	if a.is(400) || a.is(422) || a.is5xx() {
		l := r.fresh()
		b := r.do(r.post(l, l.key), nil)
		if b.ok() {
			v.fail("key/sf-string", "a quoted key got %s, the same request with a bare key %d", a, b.status)
			r.stop = "the target refuses keys spelled as sf-strings"
			return
		}
	}
	if r.aborted() == nil {
		r.setAbort(fmt.Errorf("the first request got %s %s; every case builds on a request that succeeds: check -url, -X, -d and -H", a, snippet(a.body)))
	}
}

func probeMissing(r *runner, v *verdicts) {
	x := r.do(r.post(r.fresh()), nil)
	switch {
	case x.is(400):
		v.pass("key/missing", "refused with 400")
		r.noteError("key/missing", x)
	case x.ok():
		v.fail("key/missing", "processed without a key (%s)", x)
	default:
		v.fail("key/missing", "got %s, not 400", x)
		r.noteError("key/missing", x)
	}
}

// otherPayload is a payload other than l's.
func (r *runner) otherPayload() []byte {
	if r.t.hasUnique() {
		return render(r.t.body, r.fresh().unique)
	}
	return []byte(r.t.otherBody)
}

func probeChanged(r *runner, v *verdicts) {
	l := r.fresh()
	a := r.do(r.std(l), nil)
	if !a.ok() {
		v.skip("payload/changed", "the first request got %s", a)
		v.skip("payload/changed-422", "the first request got %s", a)
		return
	}
	c := r.std(l)
	c.body = r.otherPayload()
	b := r.do(c, nil)
	switch {
	case b.replayOf(a):
		v.breach("payload/changed", "another payload got the first request's answer (%s): the payload is not compared", b)
		v.fail("payload/changed-422", "got the first answer, not 422")
	case b.ranAgain(a):
		v.fail("payload/changed", "another payload with a used key ran (%s)", b)
		v.fail("payload/changed-422", "ran (%s), not 422", b)
	case b.is(422):
		v.pass("payload/changed", "refused with 422, neither run nor replayed")
		v.pass("payload/changed-422", "refused with 422")
		r.noteError("payload/changed", b)
	default:
		v.pass("payload/changed", "answered %s", b)
		v.fail("payload/changed-422", "got %s, not 422", b)
		r.noteError("payload/changed", b)
	}
}

// reorderJSON returns a JSON object with its members in reverse order and
// other whitespace; ok is false unless body is an object with two members
// or more.
func reorderJSON(body []byte) ([]byte, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	type member struct {
		name string
		raw  json.RawMessage
	}
	var members []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		name, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		members = append(members, member{name, raw})
	}
	if _, err := dec.Token(); err != nil || len(members) < 2 || dec.More() {
		return nil, false
	}
	var out bytes.Buffer
	out.WriteString("{\n")
	for i := len(members) - 1; i >= 0; i-- {
		name, _ := json.Marshal(members[i].name)
		fmt.Fprintf(&out, "  %s : %s", name, members[i].raw)
		if i > 0 {
			out.WriteString(",")
		}
		out.WriteString("\n")
	}
	out.WriteString("}")
	return out.Bytes(), true
}

func probeReordered(r *runner, v *verdicts) {
	const id = "payload/reordered-json"
	l := r.fresh()
	a := r.do(r.std(l), nil)
	if !a.ok() {
		v.skip(id, "the first request got %s", a)
		return
	}
	c := r.std(l)
	c.body, _ = reorderJSON(c.body)
	b := r.do(c, nil)
	switch {
	case b.replayOf(a):
		v.pass(id, "taken as the same payload (replayed)")
	case b.ranAgain(a):
		v.breach(id, "the same payload with its members reordered ran again for a used key (%s)", b)
	case b.is(422):
		v.fail(id, "refused with 422: member order counted as another payload")
	default:
		v.fail(id, "got %s, not a replay", b)
	}
}

// withQuery adds a query parameter to u.
func withQuery(u, name, value string) string {
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	return u + sep + url.QueryEscape(name) + "=" + url.QueryEscape(value)
}

func probeQuery(r *runner, v *verdicts) {
	const id = "payload/query"
	l := r.fresh()
	a := r.do(r.std(l), nil)
	if !a.ok() {
		v.skip(id, "the first request got %s", a)
		return
	}
	c := r.std(l)
	c.url = withQuery(c.url, "idemcheck", l.unique)
	b := r.do(c, nil)
	switch {
	case b.is(422):
		v.pass(id, "refused with 422")
		r.noteError(id, b)
	case b.ranAgain(a):
		// Not a second execution of one request: the URL names another
		// resource, and a target may keep keys per URL.
		v.fail(id, "ran as a new request (%s): the key is kept per URL, query string included", b)
	case b.replayOf(a):
		v.fail(id, "got the first answer: the query string is not part of the request's identity")
	default:
		v.fail(id, "got %s, not 422", b)
		r.noteError(id, b)
	}
}

// slowCall is l's request made slow by -slow-header or -slow-body.
func (r *runner) slowCall(l logical) call {
	c := r.std(l)
	if r.t.slowBody != "" {
		c.body = render(r.t.slowBody, l.unique)
	}
	c.extra = r.t.slowHdr
	return c
}

func probeConcurrent(r *runner, v *verdicts) {
	l := r.fresh()
	c := r.slowCall(l)
	settle := 0 * slowSettle
	if r.t.hasSlow() {
		settle = slowSettle
	}
	a, b := r.pair(c, c, settle)
	ran := a // the request that ran, if one did
	switch {
	case a.is(409) && b.is(409):
		v.fail("concurrent/409", "both requests got 409")
		v.pass("concurrent/once", "neither ran")
		ran = nil
	case a.is(409) || b.is(409):
		conflict := b
		if a.is(409) {
			conflict, ran = a, b
		}
		v.pass("concurrent/409", "the later request got 409 while the other ran")
		v.pass("concurrent/once", "one ran (%s), the other got 409", ran)
		r.noteError("concurrent/409", conflict)
		if ra := conflict.header.Get("Retry-After"); ra != "" {
			v.pass("concurrent/retry-after", "Retry-After: %s", ra)
		} else {
			v.fail("concurrent/retry-after", "no Retry-After on the 409")
		}
	case a.ok() && b.ranAgain(a) || b.ok() && a.ranAgain(b):
		v.breach("concurrent/once", "both ran: %s", rerun(b, a))
		v.fail("concurrent/409", "the retry ran instead of getting 409")
	case r.blind != "":
		v.skip("concurrent/once", "%s", r.moot())
		v.skip("concurrent/409", "%s", r.moot())
	case a.ok() && b.replayOf(a) || b.ok() && a.replayOf(b):
		v.pass("concurrent/once", "one ran, the other got its answer")
		waited := b
		if !b.replayOf(a) {
			ran, waited = b, a
		}
		// Sent before the other's answer came, while that one was slow:
		// the target held it instead of answering 409. The draft asks for
		// 409 with SHOULD, so this is a choice, not a violation.
		if r.t.hasSlow() && waited.start.Before(ran.got) {
			v.fail("concurrent/409", "a request sent while another with its key ran was held until that one finished, and got its answer (%s) instead of 409: concurrent retries are queued", waited)
		} else {
			v.skip("concurrent/409", "inconclusive: the first request finished before its retry arrived; make it slow with -slow-header or -slow-body")
		}
	default:
		v.fail("concurrent/409", "got %s and %s", a, b)
		v.skip("concurrent/once", "cannot tell from %s and %s", a, b)
		if !a.ok() && !b.ok() {
			ran = nil
		} else if !a.ok() {
			ran = b
		}
	}
	v.skip("concurrent/retry-after", "no 409 was answered")

	if ran == nil || !ran.ok() {
		v.skip("concurrent/then-replay", "no request succeeded")
		return
	}
	x := r.do(c, nil)
	switch {
	case x.ranAgain(ran):
		v.breach("concurrent/once", "a later retry ran again: %s", rerun(x, ran))
		v.fail("concurrent/then-replay", "a later retry ran again")
	case x.is(409):
		v.fail("concurrent/then-replay", "a later retry still got 409: the key is stuck")
		r.noteError("concurrent/409", x)
	case r.blind != "":
		v.skip("concurrent/then-replay", "%s", r.moot())
	case x.replayOf(ran):
		v.pass("concurrent/then-replay", "a later retry got the answer of the request that ran")
	default:
		v.fail("concurrent/then-replay", "a later retry got %s", x)
	}
}

func probeFailure(r *runner, v *verdicts) {
	l := r.fresh()
	c := r.std(l)
	c.extra = r.t.failHdr
	a := r.do(c, nil)
	if a.err != nil || a.status < 500 {
		v.skip("failure/not-replayed", "-fail-header did not make the target answer with a 5xx: got %s", a)
		v.skip("failure/released", "-fail-header did not make the target answer with a 5xx: got %s", a)
		return
	}
	b := r.do(r.std(l), nil)
	switch {
	case b.is(409):
		v.pass("failure/not-replayed", "not replayed")
		v.fail("failure/released", "a retry after the %d got 409: the key stays locked after a failure", a.status)
	case b.status == a.status && b.replayOf(a):
		v.fail("failure/not-replayed", "the retry without -fail-header got the %d back (%s)", a.status, b)
		v.pass("failure/released", "not refused with 409")
	default:
		v.pass("failure/not-replayed", "the retry ran (%s)", b)
		v.pass("failure/released", "not refused with 409")
	}
}

func probeTenant(r *runner, v *verdicts) {
	l := r.fresh()
	a := r.do(r.std(l), nil)
	if !a.ok() {
		v.skip("tenant/isolated", "the first request got %s", a)
		v.skip("tenant/no-leak", "the first request got %s", a)
		return
	}
	c2 := r.std(l)
	c2.tenant2 = true
	b := r.do(c2, nil)
	switch {
	case b.is(401) || b.is(403):
		v.skip("tenant/isolated", "the second identity was refused (%s): check -tenant2", b)
		v.skip("tenant/no-leak", "the second identity was refused (%s): check -tenant2", b)
		return
	case b.replayOf(a):
		v.breach("tenant/isolated", "the second identity, reusing the first identity's key, got the first identity's answer (%s)", b)
		v.fail("tenant/no-leak", "the second identity got the first identity's answer")
	case b.is(409) || b.is(422):
		v.fail("tenant/no-leak", "the second identity was refused with %d because the first identity used the key", b.status)
	case b.ok():
		v.pass("tenant/no-leak", "the second identity got an answer of its own (%d)", b.status)
	default:
		v.fail("tenant/no-leak", "the second identity got %s", b)
	}

	c := r.do(r.std(l), nil)
	switch {
	case c.replayOf(b) && b.differsFrom(a):
		v.breach("tenant/isolated", "the first identity's retry got the second identity's answer")
	case c.ranAgain(a):
		v.breach("tenant/isolated", "the first identity's retry ran again after the second identity used the key (%s)", c)
	case !c.replayOf(a):
		v.fail("tenant/isolated", "the first identity's retry got %s, not its own answer", c)
	}
	if b.ok() && !b.replayOf(a) {
		d := r.do(c2, nil)
		switch {
		case d.replayOf(a):
			v.breach("tenant/isolated", "the second identity's retry got the first identity's answer")
		case d.ranAgain(b):
			v.breach("tenant/isolated", "the second identity's retry ran again (%s)", d)
		}
	}
	v.pass("tenant/isolated", "each identity got only its own answers")
}

func probeSafe(r *runner, v *verdicts) {
	const id = "safe/untouched"
	l := r.fresh()
	g0 := r.do(call{method: http.MethodGet, url: r.t.url}, nil)
	g1 := r.do(call{method: http.MethodGet, url: r.t.url, keys: []string{quote(l.key)}}, nil)
	p := r.do(r.std(l), nil)
	if g0.err != nil || g1.err != nil {
		v.fail(id, "GET without a key: %s; with a key: %s", g0, g1)
	} else if g0.status != g1.status {
		v.fail(id, "a GET with a key got %d, without one %d", g1.status, g0.status)
	}
	if g1.replayed() {
		v.fail(id, "a GET with a key was marked as a replay")
	}
	switch {
	case p.is(422) || p.is(409):
		v.fail(id, "a %s with the key a GET had used got %d: the GET was recorded", r.t.method, p.status)
	case p.sameAnswer(g1):
		v.fail(id, "a %s with the key a GET had used got the GET's answer", r.t.method)
	case p.ok():
		v.pass(id, "GET answered %d with and without a key; the key was still new for %s (%d)", g1.status, r.t.method, p.status)
	default:
		v.fail(id, "a %s with the key a GET had used got %s", r.t.method, p)
	}
}

// probeProblems checks the idempotency errors the other probes provoked.
func probeProblems(r *runner, v *verdicts) {
	ids := []string{"problem/json", "problem/docs-link", "problem/link-header"}
	if len(r.problems) == 0 {
		for _, id := range ids {
			v.skip(id, "no idempotency error (400, 409, 422) was answered")
		}
		return
	}
	// Findings are grouped, each with the answers that show it.
	found := map[string]map[string][]string{}
	var order []string
	note := func(id, finding, what string) {
		if found[id] == nil {
			found[id] = map[string][]string{}
		}
		if found[id][finding] == nil {
			order = append(order, id+"\x00"+finding)
		}
		found[id][finding] = append(found[id][finding], what)
	}
	seen := map[string]bool{}
	for _, e := range r.problems {
		what := fmt.Sprintf("%d from %s", e.x.status, e.from)
		if seen[what] {
			continue
		}
		seen[what] = true
		typ, wrong := problemType(e.x)
		if wrong != "" {
			note("problem/json", wrong, what)
		}
		link := hasDescribedBy(e.x.header)
		if !link {
			note("problem/link-header", `no Link with rel="describedby"`, what)
		}
		if !link && (typ == "" || typ == "about:blank" || !isAbsURI(typ)) {
			note("problem/docs-link", "neither a problem type URI nor a Link", what)
		}
	}
	for _, k := range order {
		id, finding, _ := strings.Cut(k, "\x00")
		answers := found[id][finding]
		list := strings.Join(answers, ", ")
		if len(answers) > 3 {
			list = fmt.Sprintf("%s and %d more", strings.Join(answers[:3], ", "), len(answers)-3)
		}
		v.fail(id, "%s: %s", finding, list)
	}
	for _, id := range ids {
		v.pass(id, "%d error answers checked", len(seen))
	}
}

// problemType returns the problem's type member, and what is wrong with x
// as an RFC 9457 problem ("" if nothing).
func problemType(x *roundTrip) (typ, wrong string) {
	mt, _, err := mime.ParseMediaType(x.header.Get("Content-Type"))
	if err != nil || mt != "application/problem+json" {
		return "", fmt.Sprintf("Content-Type %q", x.header.Get("Content-Type"))
	}
	var p map[string]any
	if err := json.Unmarshal(x.body, &p); err != nil {
		return "", "the body is not a JSON object"
	}
	typ, _ = p["type"].(string)
	if s, ok := p["status"]; ok {
		if f, ok := s.(float64); !ok || int(f) != x.status {
			return typ, fmt.Sprintf("status member %v", s)
		}
	}
	if _, ok := p["title"]; !ok && typ == "" {
		return typ, "neither type nor title"
	}
	return typ, ""
}

func hasDescribedBy(h http.Header) bool {
	for _, v := range h.Values("Link") {
		s := strings.ToLower(strings.NewReplacer(`"`, "", " ", "").Replace(v))
		if strings.Contains(s, "rel=describedby") {
			return true
		}
	}
	return false
}

func isAbsURI(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Scheme != "" && (u.Host != "" || u.Opaque != "")
}
