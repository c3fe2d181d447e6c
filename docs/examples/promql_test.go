package examples_test

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// The queries of the docs, the Prometheus rules and the Grafana dashboard
// are read by a small PromQL reader, which finds every metric they select,
// with its label matchers, and every label they group by, and checked
// against a catalog of the series a scrape of idemotel can show (and those
// the recording rules make of them). A misspelt metric, label or label
// value selects nothing, and an alert built on it would stay silent for
// ever: the check is what notices.

// selection is a metric selected in a query, with its label matchers.
type selection struct {
	name     string
	matchers []labelMatcher
}

type labelMatcher struct{ name, op, value string }

// queryRefs is what a query names.
type queryRefs struct {
	selections []selection
	groupings  []string // labels of by, without, on, ignoring, group_left and group_right
}

var (
	// The aggregation operators, which may take their by or without before
	// their parenthesis: "sum by (job) (...)".
	promqlAggregations = []string{"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
		"count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
	promqlGroupings = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
	promqlKeywords  = []string{"and", "or", "unless", "atan2", "bool", "offset", "inf", "nan"}
)

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdent(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

func skipSpace(q string, i int) int {
	for i < len(q) && strings.IndexByte(" \t\r\n", q[i]) >= 0 {
		i++
	}
	return i
}

// stringEnd returns the index just past the string literal opening at i.
func stringEnd(q string, i int) (int, error) {
	quote := q[i]
	for j := i + 1; j < len(q); j++ {
		switch {
		case q[j] == '\\' && quote != '`':
			j++
		case q[j] == quote:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string at %d", i)
}

// parseQuery reads a PromQL expression. It knows the language's lexical
// structure, not its grammar: enough to tell metric names from functions,
// operators and keywords, which is what the checks need; promtool and
// Prometheus parse the queries for real.
func parseQuery(q string) (queryRefs, error) {
	var r queryRefs
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case strings.IndexByte(" \t\r\n", c) >= 0:
			i++
		case c == '#': // a comment, to the end of the line
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			end, err := stringEnd(q, i)
			if err != nil {
				return r, err
			}
			i = end
		case c == '[': // a range or a subquery's range and step
			end := strings.IndexByte(q[i:], ']')
			if end < 0 {
				return r, fmt.Errorf("unclosed [ at %d", i)
			}
			i += end + 1
		case c == '{':
			return r, fmt.Errorf("a selector without a metric name at %d", i)
		case c >= '0' && c <= '9' || c == '.': // a number or a duration
			for i < len(q) && (isIdent(q[i]) || q[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(q) && isIdent(q[j]) {
				j++
			}
			word, next := q[i:j], skipSpace(q, j)
			lower := strings.ToLower(word)
			switch {
			case slices.Contains(promqlGroupings, lower):
				i = j
				if next < len(q) && q[next] == '(' {
					end := strings.IndexByte(q[next:], ')')
					if end < 0 {
						return r, fmt.Errorf("unclosed %s list at %d", word, next)
					}
					for _, l := range strings.Split(q[next+1:next+end], ",") {
						if l = strings.TrimSpace(l); l != "" {
							r.groupings = append(r.groupings, l)
						}
					}
					i = next + end + 1
				}
			case slices.Contains(promqlKeywords, lower),
				slices.Contains(promqlAggregations, lower),
				next < len(q) && q[next] == '(': // a function
				i = j
			default:
				sel := selection{name: word}
				i = j
				if next < len(q) && q[next] == '{' {
					ms, end, err := parseMatchers(q, next)
					if err != nil {
						return r, fmt.Errorf("%s: %v", word, err)
					}
					sel.matchers, i = ms, end
				}
				r.selections = append(r.selections, sel)
			}
		default: // operators, parentheses, commas
			i++
		}
	}
	return r, nil
}

// parseMatchers reads the label matchers in braces opening at i, and
// returns the index past the closing brace.
func parseMatchers(q string, i int) ([]labelMatcher, int, error) {
	var ms []labelMatcher
	i = skipSpace(q, i+1)
	for {
		if i < len(q) && q[i] == '}' {
			return ms, i + 1, nil
		}
		j := i
		for j < len(q) && isIdent(q[j]) {
			j++
		}
		if j == i {
			return nil, 0, fmt.Errorf("a label name expected at %d", i)
		}
		m := labelMatcher{name: q[i:j]}
		i = skipSpace(q, j)
		for _, op := range []string{"=~", "!~", "!=", "="} {
			if strings.HasPrefix(q[i:], op) {
				m.op = op
				break
			}
		}
		if m.op == "" {
			return nil, 0, fmt.Errorf("a matcher's operator expected at %d", i)
		}
		i = skipSpace(q, i+len(m.op))
		if i >= len(q) || strings.IndexByte("\"'`", q[i]) < 0 {
			return nil, 0, fmt.Errorf("a quoted value expected at %d", i)
		}
		end, err := stringEnd(q, i)
		if err != nil {
			return nil, 0, err
		}
		if m.value, err = strconv.Unquote(q[i:end]); err != nil {
			if q[i] != '\'' {
				return nil, 0, err
			}
			m.value = q[i+1 : end-1]
		}
		ms = append(ms, m)
		i = skipSpace(q, end)
		if i < len(q) && q[i] == ',' {
			i = skipSpace(q, i+1)
		}
		if i >= len(q) {
			return nil, 0, fmt.Errorf("unclosed {")
		}
	}
}

// seriesInfo is what the catalog knows of a series name: its labels,
// each with the values it takes (nil: any, such as job's), and for a
// histogram's buckets the bounds of le.
type seriesInfo struct {
	labels   map[string][]string
	bounds   []float64
	recorded bool // by a recording rule of rules.yml
}

// catalog maps the series names a query may select to what they hold.
type catalog map[string]seriesInfo

// scrapeLabels are the labels Prometheus gives every series it scrapes.
var scrapeLabels = []string{"job", "instance"}

// exportedCatalog lists the series a Prometheus scrape of idemotel shows:
// each counter and gauge family, each histogram's _bucket (with le), _sum
// and _count, and up, which Prometheus adds for each target.
func exportedCatalog(ex exported) catalog {
	c := catalog{"up": {labels: map[string][]string{"job": nil, "instance": nil}}}
	for name, f := range ex.prom {
		labels := map[string][]string{}
		for l, vals := range ex.vals[name] {
			labels[l] = vals
		}
		for _, l := range scrapeLabels {
			labels[l] = nil
		}
		if f.GetType() != dto.MetricType_HISTOGRAM {
			c[name] = seriesInfo{labels: labels}
			continue
		}
		buckets := map[string][]string{"le": nil}
		for l, vals := range labels {
			buckets[l] = vals
		}
		c[name+"_bucket"] = seriesInfo{labels: buckets, bounds: ex.le[name]}
		c[name+"_sum"] = seriesInfo{labels: labels}
		c[name+"_count"] = seriesInfo{labels: labels}
	}
	return c
}

// check returns what is wrong with query: a series the catalog does not
// have, a label it does not carry, a value it never takes, a grouping by a
// label none of the query's series carries. Values holding a Grafana
// variable ($job) are not checked.
func (c catalog) check(query string) []string {
	refs, err := parseQuery(query)
	if err != nil {
		return []string{"cannot read it: " + err.Error()}
	}
	var problems []string
	if len(refs.selections) == 0 {
		problems = append(problems, "it selects no metric")
	}
	labelsInQuery := map[string]bool{}
	for _, sel := range refs.selections {
		info, ok := c[sel.name]
		if !ok {
			problems = append(problems, sel.name+" is neither exported by idemotel nor recorded by rules.yml")
			continue
		}
		for l := range info.labels {
			labelsInQuery[l] = true
		}
		for _, m := range sel.matchers {
			values, ok := info.labels[m.name]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s has no label %s (it has %v)", sel.name, m.name, keysOf(info.labels)))
			case strings.Contains(m.value, "$"):
			case m.name == "le" && info.bounds != nil:
				problems = append(problems, checkBound(m.value, info.bounds)...)
			case values != nil && !matchesAny(m, values):
				problems = append(problems, fmt.Sprintf("%s{%s%s%q} matches none of the values exported, %v", sel.name, m.name, m.op, m.value, values))
			}
		}
	}
	for _, l := range refs.groupings {
		if !labelsInQuery[l] {
			problems = append(problems, "it groups by "+l+", a label of none of its metrics")
		}
	}
	return problems
}

// matchesAny reports whether m matches one of values. A negative matcher
// is held to the same: a value that is never exported, even after != or
// !~, is a misspelling.
func matchesAny(m labelMatcher, values []string) bool {
	for _, v := range values {
		if m.op == "=~" || m.op == "!~" {
			re, err := regexp.Compile("^(?:" + m.value + ")$")
			if err == nil && re.MatchString(v) {
				return true
			}
		} else if v == m.value {
			return true
		}
	}
	return false
}

// checkBound checks that a matcher of le names a bucket bound, in either
// of the ways Prometheus writes it ("5", "5.0"), or +Inf.
func checkBound(value string, bounds []float64) []string {
	var problems []string
	for _, alt := range strings.Split(value, "|") {
		v, err := strconv.ParseFloat(alt, 64)
		if err != nil || !math.IsInf(v, 1) && !slices.ContainsFunc(bounds, func(b float64) bool { return math.Abs(b-v) < 1e-12 }) {
			problems = append(problems, fmt.Sprintf("le %q is not one of the bounds %v", alt, bounds))
		}
	}
	return problems
}

func keysOf[V any](m map[string]V) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestQueryCheckFindsMistakes: the check reads real queries and notices
// each kind of mistake it is there for.
func TestQueryCheckFindsMistakes(t *testing.T) {
	cat := exportedCatalog(exportAll(t))
	good := []string{
		`sum by (idemkit_event) (rate(idemkit_decisions_total{idemkit_event=~"store-error|unprotected"}[5m])) > 0`,
		`histogram_quantile(0.99, sum by (job, le) (rate(idemkit_store_duration_seconds_bucket{idemkit_store_call="acquire",le=~"5|5.0"}[$__rate_interval])))`,
		`sum(rate(idemkit_decisions_total{job=~"$job"}[5m] offset 1d)) / on () group_left () sum without (instance) (up)`,
		`count_values("le", idemkit_memstore_records) # a comment naming no_such_metric`,
	}
	for _, q := range good {
		if problems := cat.check(q); len(problems) > 0 {
			t.Errorf("%s: %v", q, problems)
		}
	}
	bad := map[string]string{
		`rate(idemkit_decision_total[5m])`:                                    "idemkit_decision_total is neither",
		`rate(idemkit_decisions_total{idemkit_evnt="first"}[5m])`:             "has no label idemkit_evnt",
		`rate(idemkit_decisions_total{idemkit_event="stored"}[5m])`:           "matches none",
		`rate(idemkit_decisions_total{idemkit_event!~"confl.ct"}[5m])`:        "",
		`sum by (idemkit_reason) (rate(idemkit_decisions_total[5m]))`:         "groups by idemkit_reason",
		`idemkit_store_duration_seconds_bucket{le="7"}`:                       `le "7"`,
		`idemkit_store_duration_seconds > 0`:                                  "idemkit_store_duration_seconds is neither",
		`sum(rate({__name__="idemkit_decisions_total"}[5m]))`:                 "without a metric name",
		`idemkit_in_flight{http_request_method="POST"} or vector(0) > bool 1`: "",
	}
	for q, want := range bad {
		problems := strings.Join(cat.check(q), "; ")
		if want == "" {
			if problems != "" {
				t.Errorf("%s: %s", q, problems)
			}
			continue
		}
		if !strings.Contains(problems, want) {
			t.Errorf("%s: got %q, want a problem saying %q", q, problems, want)
		}
	}
}
