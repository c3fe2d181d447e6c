package main

import (
	"fmt"
	"strings"
)

// level is how binding a rule is.
type level int

const (
	must level = iota
	should
	may
)

func (l level) String() string { return [...]string{"MUST", "SHOULD", "MAY"}[l] }

// outcome is what a check found.
type outcome int

const (
	undecided outcome = iota
	passed
	failed
	notRun
)

func (o outcome) String() string { return [...]string{"undecided", "pass", "FAIL", "not run"}[o] }

// rule is one line of the report: a behaviour, how binding it is and where
// it comes from.
type rule struct {
	id      string
	level   level
	section string // of draft-ietf-httpapi-idempotency-key-header-07, or "common practice", "idemkit policy"
	title   string
}

// result is a rule's verdict. Its level is the rule's, raised to MUST when a
// finding breaks the promise itself (a second execution for one key, a
// replay to another identity, another request's answer), whatever the
// rule's own level.
type result struct {
	rule
	level  level
	status outcome
	detail string
}

// counts reports whether a failure of r makes idemcheck exit non-zero.
func (r *result) counts(strict bool) bool {
	return r.status == failed && (r.level == must || strict && r.level == should)
}

// verdicts collects the results of one target's checks.
type verdicts struct {
	byID map[string]*result
	list []*result
}

func newVerdicts() *verdicts {
	v := &verdicts{byID: map[string]*result{}}
	for _, ru := range rules {
		r := &result{rule: ru, level: ru.level}
		v.byID[ru.id] = r
		v.list = append(v.list, r)
	}
	return v
}

func (v *verdicts) get(id string) *result {
	r, ok := v.byID[id]
	if !ok {
		panic("idemcheck: unknown rule " + id) // a typo in a check, caught by the tests
	}
	return r
}

// pass records a pass, unless the rule already failed or was skipped.
func (v *verdicts) pass(id, format string, a ...any) {
	if r := v.get(id); r.status == undecided {
		r.status, r.detail = passed, fmt.Sprintf(format, a...)
	}
}

// skip records that the rule could not be checked, unless it was decided.
func (v *verdicts) skip(id, format string, a ...any) {
	if r := v.get(id); r.status == undecided {
		r.status, r.detail = notRun, fmt.Sprintf(format, a...)
	}
}

// fail records a failure at the rule's level; it overrides a pass, and
// several failures add up.
func (v *verdicts) fail(id, format string, a ...any) {
	r := v.get(id)
	d := fmt.Sprintf(format, a...)
	if r.status == failed {
		if !strings.Contains(r.detail, d) {
			r.detail += "; " + d
		}
		return
	}
	r.status, r.detail = failed, d
}

// breach records a failure that breaks the promise itself: always MUST.
func (v *verdicts) breach(id, format string, a ...any) {
	v.fail(id, format, a...)
	v.get(id).level = must
}

// results returns the verdicts in report order; undecided rules are
// reported as not run.
func (v *verdicts) results() []result {
	out := make([]result, 0, len(v.list))
	for _, r := range v.list {
		if r.status == undecided {
			r.status, r.detail = notRun, "no verdict"
		}
		out = append(out, *r)
	}
	return out
}
