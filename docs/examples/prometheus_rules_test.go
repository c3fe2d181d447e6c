package examples_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// observability/prometheus holds Prometheus rules for idemkit's metrics,
// their promtool tests and a Grafana dashboard. promtool checks that the
// rules parse and that each alert fires and stays quiet when its tests say
// (scripts/test-all runs it); the tests here check them against the code:
// every metric, label and value they name is one idemotel exports, every
// rule is tested both ways, and every alert has its runbook in
// docs/operations.md, which shows the alert's expression as the rule has it.

const promDir = "observability/prometheus"

// runbookBase is where each alert's runbook_url points, followed by the
// anchor of the alert's section.
const runbookBase = "https://github.com/idemkit/idemkit/blob/main/docs/operations.md#"

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func (f ruleFile) rules() []rule {
	var all []rule
	for _, g := range f.Groups {
		all = append(all, g.Rules...)
	}
	return all
}

func (f ruleFile) alerts() []rule {
	var alerts []rule
	for _, r := range f.rules() {
		if r.Alert != "" {
			alerts = append(alerts, r)
		}
	}
	return alerts
}

// ruleTests is promtool's unit test file.
type ruleTests struct {
	RuleFiles          []string        `yaml:"rule_files"`
	EvaluationInterval string          `yaml:"evaluation_interval"`
	Tests              []ruleTestGroup `yaml:"tests"`
}

type ruleTestGroup struct {
	Name        string `yaml:"name"`
	Interval    string `yaml:"interval"`
	InputSeries []struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	} `yaml:"input_series"`
	PromQLExprTest []struct {
		Expr       string `yaml:"expr"`
		EvalTime   string `yaml:"eval_time"`
		ExpSamples []struct {
			Labels string  `yaml:"labels"`
			Value  float64 `yaml:"value"`
		} `yaml:"exp_samples"`
	} `yaml:"promql_expr_test"`
	AlertRuleTest []struct {
		EvalTime  string `yaml:"eval_time"`
		Alertname string `yaml:"alertname"`
		ExpAlerts []struct {
			ExpLabels      map[string]string `yaml:"exp_labels"`
			ExpAnnotations map[string]string `yaml:"exp_annotations"`
		} `yaml:"exp_alerts"`
	} `yaml:"alert_rule_test"`
}

// readYAML decodes a file of observability/prometheus into v, refusing
// fields v does not have (a misspelt key would be ignored by the tools).
func readYAML(t *testing.T, name string, v any) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, promDir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalWithOptions(src, v, yaml.Strict()); err != nil {
		t.Fatalf("%s/%s: %v", promDir, name, err)
	}
}

func loadRules(t *testing.T) ruleFile {
	t.Helper()
	var f ruleFile
	readYAML(t, "rules.yml", &f)
	if len(f.alerts()) == 0 || len(f.alerts()) == len(f.rules()) {
		t.Fatalf("%s/rules.yml has %d rules, %d of them alerts", promDir, len(f.rules()), len(f.alerts()))
	}
	return f
}

func loadRuleTests(t *testing.T) ruleTests {
	t.Helper()
	var f ruleTests
	readYAML(t, "rules_test.yml", &f)
	if !slices.Equal(f.RuleFiles, []string{"rules.yml"}) {
		t.Fatalf("rules_test.yml tests %v, not rules.yml", f.RuleFiles)
	}
	return f
}

// parseSeries reads a series as promtool's tests write it:
// name{label="value",...}.
func parseSeries(s string) (selection, error) {
	refs, err := parseQuery(s)
	if err != nil {
		return selection{}, err
	}
	if len(refs.selections) != 1 || len(refs.groupings) > 0 {
		return selection{}, fmt.Errorf("not one series: %s", s)
	}
	for _, m := range refs.selections[0].matchers {
		if m.op != "=" {
			return selection{}, fmt.Errorf("a label of a series is set with =, not %s: %s", m.op, s)
		}
	}
	return refs.selections[0], nil
}

// rulesCatalog is the catalog of what idemotel exports, and of the series
// the recording rules make: each with the labels its promql_expr_test
// samples carry (promtool checks that the rule gives them those), which
// take the values of the labels of the series the rule reads.
func rulesCatalog(t *testing.T) catalog {
	t.Helper()
	cat := exportedCatalog(exportAll(t))
	tests := loadRuleTests(t)
	for _, r := range loadRules(t).rules() {
		if r.Record == "" {
			continue
		}
		if _, ok := cat[r.Record]; ok {
			t.Fatalf("rules.yml records %s, a name the code exports", r.Record)
		}
		refs, err := parseQuery(r.Expr)
		if err != nil {
			t.Fatalf("rules.yml: %s: %v", r.Record, err)
		}
		info := seriesInfo{labels: map[string][]string{}, recorded: true}
		for _, g := range tests.Tests {
			for _, et := range g.PromQLExprTest {
				for _, s := range et.ExpSamples {
					sel, err := parseSeries(s.Labels)
					if err != nil || sel.name != r.Record {
						continue
					}
					for _, m := range sel.matchers {
						info.labels[m.name] = nil
					}
				}
			}
		}
		// A label's values are those its sources take (rules are read
		// in order, so a recorded source is in the catalog already).
		for l := range info.labels {
			if slices.Contains(scrapeLabels, l) {
				continue
			}
			var values []string
			for _, sel := range refs.selections {
				for _, v := range cat[sel.name].labels[l] {
					if !slices.Contains(values, v) {
						values = append(values, v)
					}
				}
			}
			info.labels[l] = values
		}
		cat[r.Record] = info
	}
	return cat
}

// TestPrometheusRulesUseWhatIsExported: every rule selects only series the
// code exports (or that a recording rule before it makes), with their
// labels and values; every label a recorded series keeps is one of its
// sources'; every label an alert's annotations use is one its alerts
// carry.
func TestPrometheusRulesUseWhatIsExported(t *testing.T) {
	cat := rulesCatalog(t)
	f := loadRules(t)
	seen := catalog{}
	for name, info := range cat {
		if !info.recorded {
			seen[name] = info
		}
	}
	for _, r := range f.rules() {
		name := r.Record + r.Alert
		for _, p := range seen.check(r.Expr) {
			t.Errorf("rules.yml: %s: %s", name, p)
		}
		if r.Record == "" {
			continue
		}
		info := cat[r.Record]
		if len(info.labels) == 0 {
			t.Errorf("rules.yml: no promql_expr_test of rules_test.yml gives the labels of %s", r.Record)
		}
		for l, values := range info.labels {
			if values == nil && !slices.Contains(scrapeLabels, l) {
				t.Errorf("rules.yml: %s keeps the label %s, which none of its sources carries", r.Record, l)
			}
		}
		seen[r.Record] = info
	}
}

// TestPrometheusRuleTestsUseWhatIsExported: the series the rule tests feed
// the rules are named, labelled and valued as a scrape of idemotel shows
// them: an alert seen to fire on series the code never exports proves
// nothing.
func TestPrometheusRuleTestsUseWhatIsExported(t *testing.T) {
	cat := rulesCatalog(t)
	for _, g := range loadRuleTests(t).Tests {
		for _, in := range g.InputSeries {
			sel, err := parseSeries(in.Series)
			if err != nil {
				t.Errorf("rules_test.yml: %s: %v", g.Name, err)
				continue
			}
			if info, ok := cat[sel.name]; ok && info.recorded {
				t.Errorf("rules_test.yml: %s: %s feeds a recorded series, which the rules must compute", g.Name, in.Series)
				continue
			}
			for _, p := range cat.check(in.Series) {
				t.Errorf("rules_test.yml: %s: %s: %s", g.Name, in.Series, p)
			}
			have := map[string]bool{}
			for _, m := range sel.matchers {
				have[m.name] = true
			}
			for _, l := range scrapeLabels {
				if !have[l] {
					t.Errorf("rules_test.yml: %s: %s has no %s label, which every scraped series has", g.Name, in.Series, l)
				}
			}
		}
	}
}

// alertReads returns the series an expression reads, directly or
// through the recording rules it uses.
func alertReads(f ruleFile, expr string) []string {
	record := map[string]string{}
	for _, r := range f.rules() {
		if r.Record != "" {
			record[r.Record] = r.Expr
		}
	}
	var reads []string
	var walk func(string)
	walk = func(expr string) {
		refs, _ := parseQuery(expr)
		for _, sel := range refs.selections {
			if src, ok := record[sel.name]; ok {
				walk(src)
			} else if !slices.Contains(reads, sel.name) {
				reads = append(reads, sel.name)
			}
		}
	}
	walk(expr)
	return reads
}

// TestPrometheusRulesAreTested: each recording rule has a promql_expr_test
// with samples; each alert is seen to fire, and to stay quiet in a test
// group that feeds it series it reads (not merely for want of data).
func TestPrometheusRulesAreTested(t *testing.T) {
	f := loadRules(t)
	tests := loadRuleTests(t)
	for _, r := range f.rules() {
		if r.Record == "" {
			continue
		}
		tested := false
		for _, g := range tests.Tests {
			for _, et := range g.PromQLExprTest {
				if sel, err := parseSeries(et.Expr); err == nil && sel.name == r.Record && len(et.ExpSamples) > 0 {
					tested = true
				}
			}
		}
		if !tested {
			t.Errorf("rules_test.yml: no promql_expr_test of %s expects samples", r.Record)
		}
	}
	alerts := map[string]bool{}
	for _, a := range f.alerts() {
		alerts[a.Alert] = true
		reads := alertReads(f, a.Expr)
		var fires, quiet bool
		for _, g := range tests.Tests {
			fed := false
			for _, in := range g.InputSeries {
				if sel, err := parseSeries(in.Series); err == nil && slices.Contains(reads, sel.name) {
					fed = true
				}
			}
			for _, at := range g.AlertRuleTest {
				if at.Alertname != a.Alert {
					continue
				}
				if len(at.ExpAlerts) > 0 {
					fires = true
				} else if fed {
					quiet = true
				}
			}
		}
		if !fires {
			t.Errorf("rules_test.yml: no test sees %s fire", a.Alert)
		}
		if !quiet {
			t.Errorf("rules_test.yml: no test sees %s stay quiet on series it reads (%v)", a.Alert, reads)
		}
	}
	for _, g := range tests.Tests {
		for _, at := range g.AlertRuleTest {
			if !alerts[at.Alertname] {
				t.Errorf("rules_test.yml: %s tests %s, which rules.yml does not define", g.Name, at.Alertname)
			}
		}
	}
}

// githubAnchor returns the anchor GitHub gives a heading.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// runbook is an alert's section of operations.md.
type runbook struct {
	heading string
	line    int
	queries []string // its promql blocks
}

// runbooks returns the sections of operations.md under "### Runbooks",
// by their heading.
func runbooks(t *testing.T) map[string]*runbook {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	books := map[string]*runbook{}
	var in bool
	var cur *runbook
	var block *strings.Builder
	for n, line := range strings.Split(string(src), "\n") {
		switch {
		case block != nil && line == "```":
			cur.queries = append(cur.queries, block.String())
			block = nil
		case block != nil:
			block.WriteString(line + "\n")
		case line == "### Runbooks":
			in = true
		case in && (strings.HasPrefix(line, "## ") || strings.HasPrefix(line, "### ")):
			in, cur = false, nil
		case in && strings.HasPrefix(line, "#### "):
			cur = &runbook{heading: strings.TrimPrefix(line, "#### "), line: n + 1}
			books[cur.heading] = cur
		case cur != nil && line == "```promql":
			block = &strings.Builder{}
		}
	}
	if len(books) == 0 {
		t.Fatal(`operations.md has no "### Runbooks" with "#### " sections`)
	}
	return books
}

// TestPrometheusAlertsHaveRunbooks: each alert says its severity (page or
// ticket) and what is wrong, and links its runbook in operations.md, whose
// first query is the alert's expression as rules.yml has it; every runbook
// is an alert's. An annotation uses only labels the alert's tests see it
// carry.
func TestPrometheusAlertsHaveRunbooks(t *testing.T) {
	books := runbooks(t)
	tests := loadRuleTests(t)
	f := loadRules(t)
	alerts := map[string]bool{}
	for _, a := range f.alerts() {
		alerts[a.Alert] = true
		if s := a.Labels["severity"]; s != "page" && s != "ticket" {
			t.Errorf("%s: severity %q, want page or ticket", a.Alert, s)
		}
		if a.Annotations["summary"] == "" {
			t.Errorf("%s has no summary", a.Alert)
		}
		if got, want := a.Annotations["runbook_url"], runbookBase+githubAnchor(a.Alert); got != want {
			t.Errorf("%s: runbook_url %q, want %q", a.Alert, got, want)
		}
		book, ok := books[a.Alert]
		if !ok {
			t.Errorf("operations.md has no runbook (#### %s under ### Runbooks)", a.Alert)
			continue
		}
		if len(book.queries) == 0 || strings.TrimSpace(book.queries[0]) != strings.TrimSpace(a.Expr) {
			t.Errorf("operations.md:%d: the runbook of %s must show its expression first, as rules.yml has it:\n%s",
				book.line, a.Alert, a.Expr)
		}
		for _, text := range a.Annotations {
			for _, m := range regexp.MustCompile(`\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)`).FindAllStringSubmatch(text, -1) {
				carried := false
				for _, g := range tests.Tests {
					for _, at := range g.AlertRuleTest {
						for _, e := range at.ExpAlerts {
							_, ok := e.ExpLabels[m[1]]
							carried = carried || at.Alertname == a.Alert && ok
						}
					}
				}
				if !carried {
					t.Errorf("%s: its annotations use the label %s, which no test sees it carry", a.Alert, m[1])
				}
			}
		}
	}
	for heading, book := range books {
		if !alerts[heading] {
			t.Errorf("operations.md:%d: the runbook %q is of no alert of rules.yml", book.line, heading)
		}
	}
}

// TestOperationsListsEveryRule: the tables of recording rules and alerts
// in operations.md list those of rules.yml, each alert with its severity
// and a link to its runbook.
func TestOperationsListsEveryRule(t *testing.T) {
	f := loadRules(t)
	var records []string
	for _, r := range f.rules() {
		if r.Record != "" {
			records = append(records, r.Record)
		}
	}
	if got := tableColumn(t, "operations.md", "| recorded series |"); !slices.Equal(got, records) {
		t.Errorf("operations.md lists the recorded series\n%v\nrules.yml records\n%v", got, records)
	}
	src, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\| \[(\w+)\]\(#([\w-]+)\) \| (\w+) \|`)
	rows := row.FindAllStringSubmatch(string(src), -1)
	var listed []string
	for _, r := range rows {
		listed = append(listed, r[1])
	}
	var want []string
	for _, a := range f.alerts() {
		want = append(want, a.Alert)
		i := slices.Index(listed, a.Alert)
		if i < 0 {
			continue
		}
		if rows[i][2] != githubAnchor(a.Alert) || rows[i][3] != a.Labels["severity"] {
			t.Errorf("operations.md: %s links #%s with severity %s; want #%s and %s",
				a.Alert, rows[i][2], rows[i][3], githubAnchor(a.Alert), a.Labels["severity"])
		}
	}
	if !slices.Equal(listed, want) {
		t.Errorf("operations.md's table of alerts lists\n%v\nrules.yml has\n%v", listed, want)
	}
}
