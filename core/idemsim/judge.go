package idemsim

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	idem "github.com/idemkit/idemkit/core"
)

// The judgement of invariants 3 and 7 by the oracle (oracle.go), on
// evidence: whether a handler ran for an attempt is known from the runs
// the handlers report (the run counter), and which run a response comes
// from is written in it (its body names the run, as does its Location),
// so a replay is recognised without its marker, and a marker on a fresh
// response is caught too.

// checkAnswer judges the answer a client received for att.
func (m *model) checkAnswer(att *attempt, res result) {
	r := res.resp
	if r == nil {
		return
	}
	w := m.w
	marked := len(r.header[replayedMarker]) > 0
	if x := att.exec; x != nil {
		// A handler ran for it: this is that run's own response.
		if marked {
			w.violate(invReplay, "%s ran its handler (X%d), yet its response (%d) is marked %s", att.name, x.n, r.status, replayedMarker)
		}
		if x.resp != nil && (r.status != x.resp.status || !bytes.HasPrefix(x.resp.body, r.body)) {
			w.violate(invReplay, "%s ran its handler (X%d), yet got %d with %d bytes (%s), not what X%d wrote (%d with %d bytes)",
				att.name, x.n, r.status, len(r.body), excerpt(r.body), x.n, x.resp.status, len(x.resp.body))
		}
		whole := x.resp != nil && policyStores(r.status) && bytes.Equal(r.body, x.resp.body) && !x.resp.flushed && !x.resp.hijacked
		switch {
		case whole && x.withheld:
			w.violate(invPolicy, "%s got X%d's whole %d, whose completion the store refused (another holder, or its work undone): "+
				"a response that is not the key's outcome must be withheld", att.name, x.n, r.status)
		case whole && w.effects != nil && x.wrote && !x.committed:
			w.violate(invPolicy, "%s got X%d's whole %d, whose work in the request's transaction was rolled back, "+
				"as its completion never committed: a success for work undone must be withheld", att.name, x.n, r.status)
		}
		return
	}
	problem := problemOf(r)
	if att.badKey != "" {
		if r.status != http.StatusBadRequest || problem != att.badKey {
			w.violate(invPolicy, "%s sent %s and got %d (%s), not 400 %s", att.name, att.what, r.status, problem, att.badKey)
		}
		return
	}
	if problem == "" {
		m.checkReplay(att, r, marked)
		return
	}
	if marked {
		w.violate(invReplay, "%s got the Engine's own %d (%s) marked %s", att.name, r.status, problem, replayedMarker)
	}
	switch first := m.origin(att); problem {
	case "key-missing", "key-invalid":
		w.violate(invPolicy, "%s sent a valid key (%q) and got 400 %s", att.name, att.keyLines, problem)
	case "key-reused":
		if first != nil && sameWork(first, att) {
			w.violate(invPolicy, "%s (%s) got 422 key-reused, but it is the same request as %s (%s), which holds %s",
				att.name, att.what, first.name, first.what, idName(att.id))
		}
	case "request-in-progress":
		if first != nil && !sameWork(first, att) {
			w.violate(invPolicy, "%s (%s) got 409 request-in-progress, but %s is held by another request, %s (%s): the policy answers 422",
				att.name, att.what, idName(att.id), first.name, first.what)
		}
	}
}

// origin is the attempt that acquired the record the Engine found for
// att, if the store answered its Acquire with one.
func (m *model) origin(att *attempt) *attempt {
	if att.acquired == nil || att.acquired.out != idem.AcquireExisting {
		return nil
	}
	if t := m.tokens[att.acquired.rec.Token]; t != nil {
		return t.att
	}
	return nil
}

// checkReplay judges a response att received that no handler produced
// for it and that is no problem of the Engine's: a replay, whatever its
// header says.
func (m *model) checkReplay(att *attempt, r *response, marked bool) {
	w := m.w
	n, ok := executionOf(r)
	if !ok || n < 1 || n > len(m.execs) {
		w.violate(invReplay, "%s (%s, %s) got a response no handler run produced for it (%d, %d bytes: %s)",
			att.name, idName(att.id), att.what, r.status, len(r.body), excerpt(r.body))
		return
	}
	x := m.execs[n-1]
	switch {
	case !marked:
		w.violate(invReplay, "%s got X%d's response again (no handler ran for it), without %s: true", att.name, x.n, replayedMarker)
	case !slices.Equal(r.header[replayedMarker], []string{"true"}):
		w.violate(invReplay, "%s got X%d's response again, marked %s: %q, want the single value true", att.name, x.n, replayedMarker, r.header[replayedMarker])
	case x.id != att.id:
		w.violate(invReplay, "%s (%s) got a replay of X%d's response, which ran for another key or tenant (%s)", att.name, idName(att.id), x.n, idName(x.id))
	case x.resp == nil:
		w.violate(invReplay, "%s got a replay of X%d, which never wrote a whole response", att.name, x.n)
	case !sameWork(x.att, att):
		w.violate(invReplay, "%s (%s) got a replay of X%d's response, which served another request: %s (%s)",
			att.name, att.what, x.n, x.att.name, x.att.what)
	}
	if w.failure != nil {
		return
	}
	if why := m.notStored(x); why != "" {
		w.violate(invReplay, "%s got a replay of X%d's response, which the policy never records: %s", att.name, x.n, why)
		return
	}
	if !x.committed {
		w.violate(invReplay, "%s got a replay of X%d's response, whose completion never reached the store", att.name, x.n)
		return
	}
	if a := att.acquired; a != nil && a.rec.Token != x.token {
		w.violate(invReplay, "%s got a replay of X%d's response, but the record the store answered with is %s's", att.name, x.n, m.label(a.rec.Token))
		return
	}
	want := x.resp
	if r.status != want.status || !bytes.Equal(r.body, want.body) {
		w.violate(invReplay, "%s got a replay of X%d that is not what it wrote: %d with %d bytes (%s), first %d with %d bytes",
			att.name, x.n, r.status, len(r.body), excerpt(r.body), want.status, len(want.body))
		return
	}
	if name, ok := sameReplayedHeader(r.header, want.header); !ok {
		w.violate(invReplay, "%s got a replay of X%d whose %s header is %q; the first response had %q (replayed: %v)",
			att.name, x.n, name, r.header[name], want.header[name], policyReplayed)
	}
}

// executionOf reads which handler run wrote a response: its body names
// the run, and so does its Location, for a response without a body.
func executionOf(r *response) (int, bool) {
	if i := bytes.Index(r.body, []byte(`"execution":`)); i >= 0 {
		rest := r.body[i+len(`"execution":`):]
		j := 0
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if n, err := strconv.Atoi(string(rest[:j])); err == nil && j < len(rest) && rest[j] == ',' {
			return n, true
		}
	}
	var n int
	if _, err := fmt.Sscanf(r.header.Get("Location"), "/orders/X%d", &n); err == nil {
		return n, true
	}
	return 0, false
}

// notStored says why the policy never records x's response, or "".
func (m *model) notStored(x *exec) string {
	r := x.resp
	switch {
	case r == nil:
		return "it wrote no whole response"
	case !policyStores(r.status):
		return fmt.Sprintf("status %d is never recorded", r.status)
	case r.hijacked:
		return "it was written over a hijacked connection"
	case r.flushed:
		return "it was streamed (flushed)"
	case len(r.body) > m.w.p.maxBody:
		return fmt.Sprintf("its body (%d bytes) exceeds the limit (%d)", len(r.body), m.w.p.maxBody)
	case r.declared >= 0 && r.declared != len(r.body):
		return fmt.Sprintf("its Content-Length (%d) is not the length of its body (%d)", r.declared, len(r.body))
	}
	return ""
}

// checkStored judges what the Engine asks the store to record for token:
// only a whole response the policy records, as its handler wrote it, with
// the replayed headers and all their values, and no other header.
func (m *model) checkStored(token string, c idem.Completion) {
	w := m.w
	x := m.execOf[token]
	if x == nil {
		w.violate(invPolicy, "the Engine stores a response for %s, whose handler never ran", m.label(token))
		return
	}
	if why := m.notStored(x); why != "" {
		w.violate(invPolicy, "the Engine stores X%d's response (%d, %d bytes), which the policy never records: %s",
			x.n, c.Response.Status, len(c.Response.Body), why)
		return
	}
	if c.Response.Status != x.resp.status || !bytes.Equal(c.Response.Body, x.resp.body) {
		w.violate(invPolicy, "the Engine stores %d with %d bytes for X%d, which wrote %d with %d bytes",
			c.Response.Status, len(c.Response.Body), x.n, x.resp.status, len(x.resp.body))
		return
	}
	h := http.Header{}
	for _, f := range c.Response.Header {
		h[f.Name] = append(h[f.Name], f.Values...)
	}
	if name, ok := sameReplayedHeader(h, x.resp.header); !ok {
		w.violate(invPolicy, "the Engine stores X%d's response with %s %q; the handler wrote %q (replayed: %v)",
			x.n, name, h[name], x.resp.header[name], policyReplayed)
	}
}

// checkFingerprint judges the Engine's fingerprint of att against the
// policy's rule, as it reaches the store: two requests (or jobs, or a job
// and a request) the policy tells apart never share one, and two sendings
// of one request (deliveries of one job) always do.
func (m *model) checkFingerprint(att *attempt, fp idem.Fingerprint) {
	w := m.w
	if first, ok := m.fpFirst[fp]; ok {
		if !sameWork(first, att) {
			w.violate(invPolicy, "%s (%s, %s) has the fingerprint of %s (%s, %s), another request",
				att.name, att.target(), att.what, first.name, first.target(), first.what)
		}
		return
	}
	m.fpFirst[fp] = att
	bucket := att.bucket()
	for _, o := range m.requests[bucket] {
		if sameWork(o, att) {
			w.violate(invPolicy, "%s (%s) and %s (%s) are one request, with two fingerprints", att.name, att.what, o.name, o.what)
			return
		}
	}
	m.requests[bucket] = append(m.requests[bucket], att)
}

// checkTakeover judges a takeover: only the request that holds a key may
// take over its lapsed lease; a key reused with another request never is.
func (m *model) checkTakeover(a idem.Acquire, held idem.Record) {
	by, was := m.tokens[a.Token], m.tokens[held.Token]
	if by == nil || was == nil || by.att == nil || was.att == nil {
		return
	}
	if !sameWork(by.att, was.att) {
		m.w.violate(invPolicy, "%s (%s) took over %s from %s, which holds it for another request (%s)",
			by.att.name, by.att.what, idName(a.ID), was.label, was.att.what)
	}
}

// sortedNames returns h's names in order, for messages that must not
// depend on a map's order.
func sortedNames(h http.Header) []string {
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}
