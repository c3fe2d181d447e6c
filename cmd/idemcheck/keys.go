package main

import (
	"fmt"
	"strings"
)

// The key syntax cases: each sends the key spelled one way and expects it
// taken as the same key as its sf-string spelling, or refused with 400.

// sameKeyOr400 sends l's request with the quoted key, then with the key
// spelled by spell: that must be the same key (a replay) or a 400.
func sameKeyOr400(r *runner, v *verdicts, id, what string, spell func(key string) string) {
	l := r.fresh()
	a := r.do(r.std(l), nil)
	if !a.ok() {
		v.skip(id, "the quoted key's request got %s", a)
		return
	}
	b := r.do(r.post(l, spell(l.key)), nil)
	switch {
	case b.is(400):
		v.pass(id, "%s refused with 400", what)
		r.noteError(id, b)
	case b.replayOf(a):
		v.pass(id, "%s taken as the same key (replayed)", what)
	case b.ranAgain(a):
		v.fail(id, "%s taken as another key: the request ran again (%s)", what, b)
	default:
		v.fail(id, "%s got %s, neither a replay nor 400", what, b)
	}
}

func probeBare(r *runner, v *verdicts) {
	sameKeyOr400(r, v, "key/bare-token", "the bare key", func(k string) string { return k })
}

func probeParams(r *runner, v *verdicts) {
	sameKeyOr400(r, v, "key/parameters", "the key with a parameter", func(k string) string { return quote(k) + ";v=1" })
}

func probeEscapes(r *runner, v *verdicts) {
	const id = "key/escapes"
	l := r.fresh()
	field := `"` + l.key + `-\"q\\b"`
	a := r.do(r.post(l, field), nil)
	switch {
	case a.is(400):
		v.fail(id, "a valid sf-string with escapes was refused with 400")
		r.noteError(id, a)
		return
	case !a.ok():
		v.fail(id, "got %s", a)
		return
	}
	b := r.do(r.post(l, field), nil)
	switch {
	case b.ranAgain(a):
		v.breach(id, "its retry ran again (%s)", b)
	case b.replayOf(a):
		v.pass(id, "accepted, and its retry replayed")
	default:
		v.fail(id, "accepted, but its retry got %s", b)
	}
}

// refused sends a request with the key field lines fields and expects 400;
// it reports what happened, or "" for a 400.
func refused(r *runner, id string, fields ...string) (x *roundTrip, wrong string) {
	x = r.do(r.post(r.fresh(), fields...), nil)
	switch {
	case x.is(400):
		r.noteError(id, x)
		return x, ""
	case x.ok():
		return x, fmt.Sprintf("accepted (%s)", x)
	default:
		return x, fmt.Sprintf("got %s, not 400", x)
	}
}

// refuse checks one spelling that must get 400.
func refuse(r *runner, v *verdicts, id, what string, fields ...string) {
	if _, wrong := refused(r, id, fields...); wrong != "" {
		v.fail(id, "%s %s", what, wrong)
	} else {
		v.pass(id, "%s refused with 400", what)
	}
}

func probeTwoLines(r *runner, v *verdicts) {
	const id = "key/two-lines"
	l1, l2 := r.fresh(), r.fresh()
	x, wrong := refused(r, id, quote(l1.key), quote(l2.key))
	if wrong == "" {
		v.pass(id, "refused with 400")
		return
	}
	if !x.ok() || r.moot() != "" {
		v.fail(id, "two field lines %s", wrong)
		return
	}
	// Which line was used? Retry with the first line alone (the body is the
	// one the two-line request carried).
	c := r.post(l1, quote(l1.key))
	c.body = x.call.body
	y := r.do(c, nil)
	used := "one of them was used silently"
	if y.replayOf(x) {
		used = "the first line was used silently"
	} else if y.ok() {
		used = "the first line was not the key used"
	}
	v.fail(id, "two field lines %s: %s", wrong, used)
}

func probeList(r *runner, v *verdicts) {
	l1, l2 := r.fresh(), r.fresh()
	refuse(r, v, "key/list", "a list of two keys", quote(l1.key)+", "+quote(l2.key))
}

func probeMalformed(r *runner, v *verdicts) {
	const id = "key/malformed"
	spellings := []struct{ what, field string }{
		{"a bad escape", `"%s\q"`},
		{"an unterminated string", `"%s`},
		{"trailing junk", `"%s"junk`},
	}
	var failures []string
	for _, s := range spellings {
		if _, wrong := refused(r, id, fmt.Sprintf(s.field, r.fresh().key)); wrong != "" {
			failures = append(failures, s.what+" "+wrong)
		}
	}
	if len(failures) > 0 {
		v.fail(id, "%s", strings.Join(failures, "; "))
	} else {
		v.pass(id, "a bad escape, an unterminated string and trailing junk refused with 400")
	}
}

func probeControl(r *runner, v *verdicts) {
	k := r.fresh().key
	refuse(r, v, "key/control-chars", "a key with a tab", `"`+k[:10]+"\t"+k[10:]+`"`)
}

func probeNonASCII(r *runner, v *verdicts) {
	refuse(r, v, "key/non-ascii", "a key with UTF-8 bytes", `"`+r.fresh().key+"-\u00e9\"")
}

func probeEmpty(r *runner, v *verdicts) {
	refuse(r, v, "key/empty", "an empty key", `""`)
}

// longKeyLen is the length of the over-long key: longer than any limit
// implementations publish (commonly 255), far below header size limits.
const longKeyLen = 1024

func probeOverLong(r *runner, v *verdicts) {
	const id = "key/over-long"
	l := r.fresh()
	pad := strings.Repeat("x", longKeyLen-len(l.key)-1)
	long := func(last string) string { return quote(l.key + pad + last) }
	a := r.do(r.post(l, long("1")), nil)
	switch {
	case a.is(400) || a.is(431):
		v.pass(id, "refused with %d", a.status)
		r.noteError(id, a)
		return
	case !a.ok():
		v.fail(id, "got %s", a)
		return
	}
	// Accepted: a key that differs only in its last character, sent with
	// the same payload, must be another key. A target that cuts keys short
	// takes it as the first one, even if it keeps records per payload too.
	b := r.do(r.post(l, long("2")), nil)
	switch {
	case b.is(409) || b.is(422):
		v.fail(id, "a key that differs only in its last character was taken as the first (%d): keys are cut short", b.status)
	case b.ranAgain(a):
		v.pass(id, "accepted and kept whole")
	case b.replayOf(a):
		// The same answer: the key was cut short, unless this endpoint
		// answers a payload the same way whatever the key. A fresh key
		// with that payload tells which.
		c := r.do(r.post(l, quote(r.fresh().key)), nil)
		if c.differsFrom(a) {
			v.breach(id, "two keys that differ only in their last character got the same answer, and a fresh key with the same payload another: keys are cut short, and a request got another's answer")
		} else {
			v.skip(id, "cannot tell: a fresh key with the same payload got that answer too (%s), so the answer does not show which request it is for", c)
		}
	default:
		v.fail(id, "the second long key got %s", b)
	}
}
