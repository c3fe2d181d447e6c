package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// draft is the specification the levels and sections refer to.
const draft = "draft-ietf-httpapi-idempotency-key-header-07"

// targetReport is what one target's run found.
type targetReport struct {
	name     string
	prefix   string // the run's key prefix
	requests int    // requests sent
	budget   int    // requests announced
	results  []result
	// diagnosis is what the run found about the target as a whole (that
	// it keeps no keys, or that its answers cannot be told apart), or "".
	diagnosis string
}

// report is a whole run.
type report struct {
	strict  bool
	targets []targetReport
	skipped []string // OpenAPI operations not checked, and why
}

// exitStatus is 1 when a MUST case failed (with strict, a SHOULD case too).
func (rep *report) exitStatus() int {
	for _, t := range rep.targets {
		for i := range t.results {
			if t.results[i].counts(rep.strict) {
				return 1
			}
		}
	}
	return 0
}

// tally counts results by level and outcome.
type tally map[level]map[outcome]int

func (rep *report) tally() tally {
	t := tally{must: {}, should: {}, may: {}}
	for _, tr := range rep.targets {
		for _, r := range tr.results {
			t[r.level][r.status]++
		}
	}
	return t
}

func (t tally) line() string {
	var parts []string
	for _, l := range []level{must, should, may} {
		c := t[l]
		s := fmt.Sprintf("%s %d passed, %d failed", l, c[passed], c[failed])
		if c[notRun] > 0 {
			s += fmt.Sprintf(", %d not run", c[notRun])
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// writeTable writes the human-readable report.
func (rep *report) writeTable(w io.Writer) error {
	for i, t := range rep.targets {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "idemcheck %s\n", t.name)
		fmt.Fprintf(w, "%d requests sent (announced at most %d), keys idemcheck-%s-*, levels and sections of %s\n\n",
			t.requests, t.budget, t.prefix, draft)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "STATUS\tLEVEL\tSECTION\tCASE\tDETAIL")
		for _, r := range t.results {
			lvl := r.level.String()
			if r.level != r.rule.level {
				lvl += "*"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.status, lvl, r.section, r.id, r.detail)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if t.diagnosis != "" {
			fmt.Fprintf(w, "\ndiagnosis: %s\n", t.diagnosis)
		}
	}
	for _, s := range rep.skipped {
		fmt.Fprintf(w, "\nnot checked: %s", s)
	}
	if len(rep.skipped) > 0 {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "\n%s\n", rep.tally().line())
	if rep.raised() {
		fmt.Fprintln(w, "* raised to MUST: the finding breaks the promise itself (a second execution, another request's or identity's answer)")
	}
	_, err := fmt.Fprintf(w, "exit status %d: %s\n", rep.exitStatus(), rep.verdict())
	return err
}

func (rep *report) raised() bool {
	for _, t := range rep.targets {
		for _, r := range t.results {
			if r.level != r.rule.level {
				return true
			}
		}
	}
	return false
}

func (rep *report) verdict() string {
	if rep.exitStatus() == 0 {
		if rep.strict {
			return "no MUST or SHOULD case failed"
		}
		return "no MUST case failed"
	}
	if rep.strict {
		return "a MUST or SHOULD case failed"
	}
	return "a MUST case failed"
}

// The JSON report; field names are part of the published output.
type jsonReport struct {
	Tool    string       `json:"tool"`
	Draft   string       `json:"draft"`
	Strict  bool         `json:"strict"`
	Exit    int          `json:"exit"`
	Targets []jsonTarget `json:"targets"`
	Skipped []string     `json:"not_checked,omitempty"`
}

type jsonTarget struct {
	Name      string       `json:"name"`
	KeyPrefix string       `json:"key_prefix"`
	Requests  int          `json:"requests"`
	Announced int          `json:"announced"`
	Results   []jsonResult `json:"results"`
	Diagnosis string       `json:"diagnosis,omitempty"`
}

type jsonResult struct {
	ID        string `json:"id"`
	Level     string `json:"level"`
	RuleLevel string `json:"rule_level"`
	Section   string `json:"section"`
	Title     string `json:"title"`
	Status    string `json:"status"` // pass, fail, not run
	Counts    bool   `json:"counts"` // this failure makes the exit status non-zero
	Detail    string `json:"detail"`
}

func statusWord(o outcome) string {
	if o == failed {
		return "fail"
	}
	return o.String()
}

func (rep *report) writeJSON(w io.Writer) error {
	out := jsonReport{Tool: "idemcheck", Draft: draft, Strict: rep.strict, Exit: rep.exitStatus(), Skipped: rep.skipped, Targets: []jsonTarget{}}
	for _, t := range rep.targets {
		jt := jsonTarget{Name: t.name, KeyPrefix: "idemcheck-" + t.prefix + "-", Requests: t.requests, Announced: t.budget, Diagnosis: t.diagnosis}
		for _, r := range t.results {
			jt.Results = append(jt.Results, jsonResult{
				ID: r.id, Level: r.level.String(), RuleLevel: r.rule.level.String(), Section: r.section, Title: r.title,
				Status: statusWord(r.status), Counts: r.counts(rep.strict), Detail: r.detail,
			})
		}
		out.Targets = append(out.Targets, jt)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// JUnit XML, as CI systems read it: one testsuite per target, one testcase
// per case. Only failures that count towards the exit status are
// <failure>s; other unmet SHOULD and MAY cases pass with the finding in
// <system-out>, and cases that could not run are <skipped>.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Skipped   int         `xml:"skipped,attr"`
	Cases     []junitCase `xml:"testcase"`
	SystemOut string      `xml:"system-out,omitempty"` // the diagnosis
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Skipped   *junitSkipped `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

type junitSkipped struct {
	Message string `xml:"message,attr"`
}

func (rep *report) writeJUnit(w io.Writer) error {
	out := junitSuites{Name: "idemcheck"}
	for _, t := range rep.targets {
		s := junitSuite{Name: t.name, SystemOut: t.diagnosis}
		for _, r := range t.results {
			c := junitCase{
				Name:      fmt.Sprintf("%s %s (%s %s)", r.id, r.title, r.level, r.section),
				Classname: "idemcheck." + r.level.String(),
			}
			switch {
			case r.counts(rep.strict):
				c.Failure = &junitFailure{Message: r.detail, Type: r.level.String(), Text: r.detail}
				s.Failures++
			case r.status == failed:
				c.SystemOut = fmt.Sprintf("not met (%s, does not fail the run): %s", r.level, r.detail)
			case r.status == notRun:
				c.Skipped = &junitSkipped{Message: r.detail}
				s.Skipped++
			default:
				c.SystemOut = r.detail
			}
			s.Cases = append(s.Cases, c)
			s.Tests++
		}
		out.Tests += s.Tests
		out.Failures += s.Failures
		out.Skipped += s.Skipped
		out.Suites = append(out.Suites, s)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(out); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
