package examples_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// grafanaDashboard is what the tests read of observability/prometheus's
// Grafana dashboard.
type grafanaDashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource json.RawMessage `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaPanel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		Expr       string          `json:"expr"`
		RefID      string          `json:"refId"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's
}

// grafanaDatasource is how every panel and query names the data source:
// the dashboard's variable, so that it works with any Prometheus.
const grafanaDatasource = `{"type":"prometheus","uid":"${datasource}"}`

func loadDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, promDir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(src, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	return d
}

// panels returns the dashboard's panels, with those of collapsed rows.
func (d grafanaDashboard) panels() []grafanaPanel {
	var all []grafanaPanel
	for _, p := range d.Panels {
		all = append(all, p)
		all = append(all, p.Panels...)
	}
	return all
}

// sameJSON reports whether raw is the JSON value want, whatever its layout.
func sameJSON(raw json.RawMessage, want string) bool {
	var a, b any
	return json.Unmarshal(raw, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && fmt.Sprint(a) == fmt.Sprint(b)
}

var grafanaVariable = regexp.MustCompile(`\$(?:\{(\w+)\}|(\w+))`)

// grafanaBuiltins are the variables Grafana defines itself.
var grafanaBuiltins = []string{"__rate_interval", "__interval", "__range"}

// TestGrafanaDashboardUsesWhatIsExported: every query of the dashboard
// selects series the code exports, with their labels and values, filtered
// by the job and instance the viewer chose, on the dashboard's data
// source; its variables list what exists; its panels do not overlap.
func TestGrafanaDashboardUsesWhatIsExported(t *testing.T) {
	cat := rulesCatalog(t)
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
		t.Errorf("dashboard.json: uid %q, title %q, schemaVersion %d", d.UID, d.Title, d.SchemaVersion)
	}
	variables := slices.Clone(grafanaBuiltins)
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)
	for _, v := range d.Templating.List {
		variables = append(variables, v.Name)
		switch v.Type {
		case "datasource":
			if v.Name != "datasource" || !sameJSON(v.Query, `"prometheus"`) {
				t.Errorf("dashboard.json: the data source variable is %s, of %s; want datasource, of prometheus", v.Name, v.Query)
			}
		case "query":
			var q struct{ Query string }
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Errorf("dashboard.json: variable %s: %v", v.Name, err)
				continue
			}
			m := labelValues.FindStringSubmatch(q.Query)
			if m == nil {
				t.Errorf("dashboard.json: variable %s: %q is no label_values(metric, label)", v.Name, q.Query)
				continue
			}
			for _, p := range cat.check(m[1]) {
				t.Errorf("dashboard.json: variable %s: %s", v.Name, p)
			}
			if sel, err := parseSeries(m[1]); err == nil {
				if _, ok := cat[sel.name].labels[m[2]]; !ok {
					t.Errorf("dashboard.json: variable %s: %s has no label %s", v.Name, sel.name, m[2])
				}
			}
			if !sameJSON(v.Datasource, grafanaDatasource) {
				t.Errorf("dashboard.json: variable %s queries %s, not the dashboard's data source", v.Name, v.Datasource)
			}
		default:
			t.Errorf("dashboard.json: variable %s of type %s", v.Name, v.Type)
		}
	}
	ids := map[int]bool{}
	var placed []grafanaPanel
	queries := 0
	for _, p := range d.panels() {
		if ids[p.ID] {
			t.Errorf("dashboard.json: two panels have the id %d", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			t.Errorf("dashboard.json: %q is placed at %+v, outside the 24 columns", p.Title, g)
		}
		for _, o := range placed {
			h := o.GridPos
			if g.X < h.X+h.W && h.X < g.X+g.W && g.Y < h.Y+h.H && h.Y < g.Y+g.H {
				t.Errorf("dashboard.json: %q overlaps %q", p.Title, o.Title)
			}
		}
		placed = append(placed, p)
		if p.Type == "row" {
			continue
		}
		if !sameJSON(p.Datasource, grafanaDatasource) {
			t.Errorf("dashboard.json: %q uses the data source %s, not the dashboard's", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("dashboard.json: %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			where := fmt.Sprintf("dashboard.json: %q, query %s", p.Title, q.RefID)
			if !sameJSON(q.Datasource, grafanaDatasource) {
				t.Errorf("%s uses the data source %s, not the dashboard's", where, q.Datasource)
			}
			for _, problem := range cat.check(q.Expr) {
				t.Errorf("%s: %s", where, problem)
			}
			for _, m := range grafanaVariable.FindAllStringSubmatch(q.Expr, -1) {
				if name := m[1] + m[2]; !slices.Contains(variables, name) {
					t.Errorf("%s uses $%s, which the dashboard does not define", where, name)
				}
			}
			refs, _ := parseQuery(q.Expr)
			for _, sel := range refs.selections {
				var job, instance bool
				for _, m := range sel.matchers {
					job = job || m.name == "job" && m.op == "=~" && m.value == "$job"
					instance = instance || m.name == "instance" && m.op == "=~" && m.value == "$instance"
				}
				if !job || !instance {
					t.Errorf(`%s: %s is not filtered by job=~"$job" and instance=~"$instance"`, where, sel.name)
				}
			}
		}
	}
	if queries < 10 {
		t.Errorf("dashboard.json has %d queries", queries)
	}
}

// dashboardQueries returns the dashboard's queries with its variables set
// to values a Prometheus can run: every job and instance, and range.
func dashboardQueries(t *testing.T, rateInterval string) []string {
	var qs []string
	for _, p := range loadDashboard(t).panels() {
		for _, q := range p.Targets {
			qs = append(qs, strings.NewReplacer(`"$job"`, `".*"`, `"$instance"`, `".*"`,
				"$__rate_interval", rateInterval).Replace(q.Expr))
		}
	}
	return qs
}
