package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The storm that TestPrometheusScrapesTheDemo sends, which the picture in
// docs/operations.md shows (and that page says so, in these figures).
const (
	stormCharges         = 1000
	stormRefunds         = 400 // of those charges, each refunded in part
	stormClients         = 20
	stormProviderFailure = 5 // percent of the payment provider's calls
)

// graphQuery is the query of the picture: guarded requests a second by
// decision (the outcome of each), over a window that suits a scrape a
// second. Prometheus scrapes the demo alone, so no job is named: the query
// fits on the page's one line.
const graphQuery = `sum by (idemkit_event) (rate(idemkit_decisions_total[5s]))`

// picturesEnv names the folder where TestPrometheusScrapesTheDemo writes
// metrics.png: `make pictures` sets it to docs/img. Unset, the picture
// goes to a temporary folder, so that a test run leaves the working tree
// as it found it.
const picturesEnv = "IDEMKIT_PICTURES"

// lookPath finds a program that a test needs, or fails it saying which
// Debian package has it.
func lookPath(t *testing.T, name, pkg, why string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s is missing (%v): install Debian's %s package (apt-get install %s); %s", name, err, pkg, pkg, why)
	}
	return p
}

// command returns a command that runs in a process group of its own, so
// that ending it (when ctx ends, or at cleanup) ends its children too.
func command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// promAPI queries a Prometheus through its HTTP API.
type promAPI struct {
	t    *testing.T
	base string
}

// sample is an instant vector's element.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  float64
}

// get fetches path and decodes the API's answer into data; it returns the
// API's error, if any.
func (p promAPI) get(path string, params url.Values, data any) error {
	p.t.Helper()
	resp, err := http.Get(p.base + path + "?" + params.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var answer struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	if answer.Status != "success" {
		return fmt.Errorf("%s: %s", answer.Status, answer.Error)
	}
	return json.Unmarshal(answer.Data, data)
}

// query runs an instant query and returns its samples.
func (p promAPI) query(q string) ([]sample, error) {
	p.t.Helper()
	var data struct {
		ResultType string `json:"resultType"`
		Result     []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {q}}, &data); err != nil {
		return nil, fmt.Errorf("%s: %v", q, err)
	}
	if data.ResultType != "vector" {
		return nil, fmt.Errorf("%s: a %s, not a vector", q, data.ResultType)
	}
	var out []sample
	for _, r := range data.Result {
		s, _ := r.Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: value %v", q, r.Value[1])
		}
		out = append(out, sample{Metric: r.Metric, Value: v})
	}
	return out, nil
}

// mustQuery is query that fails the test on an error.
func (p promAPI) mustQuery(q string) []sample {
	p.t.Helper()
	s, err := p.query(q)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// byLabel returns the samples' values by the value of label.
func byLabel(samples []sample, label string) map[string]float64 {
	m := map[string]float64{}
	for _, s := range samples {
		m[s.Metric[label]] = s.Value
	}
	return m
}

// waitFor polls check until it returns "" or the deadline passes, and
// fails the test with its last complaint then.
func waitFor(t *testing.T, d time.Duration, check func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		problem := check()
		if problem == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, problem)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestPrometheusScrapesTheDemo starts a real Prometheus (Debian's
// package), with the rules of observability/prometheus, scraping the
// payments demo's admin listener every second while the demo's storm sends
// it charges through its fault-injecting proxy. Prometheus's HTTP API must
// then show the decisions by event, the store calls and their latency, the
// handlers in flight during the storm and none after it, the recorded
// series of every rule whose inputs the demo exports, every rule evaluated
// without error, and every query of the Grafana dashboard accepted. Then it
// photographs Prometheus's graph of the requests a second by decision in
// headless Chromium (see picturesEnv).
func TestPrometheusScrapesTheDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("-short skips it: it starts Prometheus, the demo and its storm (make test runs it)")
	}
	prometheus := lookPath(t, "prometheus", "prometheus", "the demo's metrics are scraped by a real Prometheus")
	chromium := lookPath(t, orDefault(os.Getenv("IDEMKIT_CHROMIUM"), "chromium"), "chromium", "Prometheus's graph is photographed in it")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began := time.Now()

	bin := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+string(filepath.Separator), "./demo/payments", "./demo/payments/cmd/storm")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the demo and the storm: %v\n%s", err, out)
	}
	t.Logf("built the demo and the storm in %v", time.Since(began).Round(time.Millisecond))

	api, admin := freeAddr(t), freeAddr(t)
	if api == admin {
		t.Fatalf("the same free port twice: %s %s", api, admin)
	}
	startProgram(t, filepath.Join(bin, "payments"), []string{"-addr", api, "-admin-addr", admin,
		"-db", "payments.db", "-provider-failure-rate", strconv.FormatFloat(stormProviderFailure/100.0, 'f', -1, 64)}, nil, admin)

	p := startPrometheus(ctx, t, prometheus, map[string]string{"payments": admin})

	stormStart := time.Now()
	var stormOut, stormErr bytes.Buffer
	storm := command(ctx, filepath.Join(bin, "storm"), "-target", "http://"+api, "-admin-target", "http://"+admin,
		"-n", strconv.Itoa(stormCharges), "-refunds", strconv.Itoa(stormRefunds), "-c", strconv.Itoa(stormClients), "-timeout", "90s")
	storm.Stdout, storm.Stderr = &stormOut, &stormErr
	if err := storm.Run(); err != nil {
		t.Fatalf("the storm: %v\n%s\n%s", err, stormOut.String(), stormErr.String())
	}
	stormEnd := time.Now()
	t.Logf("the storm took %v:\n%s", stormEnd.Sub(stormStart).Round(time.Millisecond), stormOut.String())

	// Each charge's and refund's answer is recorded once, and so is each
	// of the provider's settlement events, one per charge and refund,
	// twice: the webhook request that delivers it (keyed by its
	// webhook-id) and the event's own record, which Engine.Do keeps under
	// the event's id. Once Prometheus has them all, it has scraped the end
	// of the storm.
	const stored = `sum(idemkit_handler_outcomes_total{job="payments",idemkit_event="stored"})`
	const wantStored = 3 * (stormCharges + stormRefunds)
	waitFor(t, 20*time.Second, func() string {
		s, err := p.query(stored)
		if err != nil {
			return err.Error()
		}
		if len(s) != 1 || s[0].Value != wantStored {
			return fmt.Sprintf("%s is %v, want %d", stored, s, wantStored)
		}
		return ""
	})

	decisions := byLabel(p.mustQuery(`sum by (idemkit_event) (idemkit_decisions_total{job="payments"})`), "idemkit_event")
	if decisions["first"] < stormCharges || decisions["replay"] == 0 || decisions["conflict"] == 0 {
		t.Errorf("decisions by event %v: want at least %d first, and replays and conflicts", decisions, stormCharges)
	}
	calls := p.mustQuery(`sum by (idemkit_store_call, idemkit_store_result) (idemkit_store_duration_seconds_count{job="payments"})`)
	counted := map[string]float64{}
	for _, s := range calls {
		counted[s.Metric["idemkit_store_call"]+"/"+s.Metric["idemkit_store_result"]] = s.Value
	}
	if counted["acquire/ok"] < decisions["first"] || counted["complete/ok"] < stormCharges {
		t.Errorf("store calls %v: want an acquire for each of %v first decisions and a completion for each of %d charges",
			counted, decisions["first"], stormCharges)
	}
	latency := p.mustQuery(`histogram_quantile(0.99, sum by (le) (rate(idemkit_store_duration_seconds_bucket{job="payments",idemkit_store_call="acquire"}[1m])))`)
	if len(latency) != 1 || !(latency[0].Value > 0) || math.IsInf(latency[0].Value, 0) {
		t.Errorf("the 99th percentile of acquires is %v, want a duration", latency)
	}
	during := p.mustQuery(`max_over_time(sum(idemkit_in_flight{job="payments"})[2m:1s])`)
	after := p.mustQuery(`sum(idemkit_in_flight{job="payments"})`)
	if len(during) != 1 || during[0].Value < 1 || len(after) != 1 || after[0].Value != 0 {
		t.Errorf("handlers in flight: at most %v during the storm, %v after it; want some, then none", during, after)
	}

	checkRulesEvaluated(t, p)
	for _, q := range dashboardQueries(t, "15s") {
		if _, err := p.query(q); err != nil {
			t.Errorf("the dashboard's query: %v", err)
		}
	}

	dest := os.Getenv(picturesEnv)
	if dest == "" {
		dest = t.TempDir()
	}
	// The graph runs from just before the storm to when the rates of its
	// end have left the 5 s window.
	time.Sleep(time.Until(stormEnd.Add(6 * time.Second)))
	photographGraph(ctx, t, chromium, p.base, time.Since(stormStart)+2*time.Second, filepath.Join(dest, "metrics.png"))
	t.Logf("took %v in all", time.Since(began).Round(time.Millisecond))
}

// startPrometheus starts the prometheus binary on a free loopback port,
// with the rules of observability/prometheus, scraping each job's target
// every second and evaluating the rules every second, and waits until it
// has scraped every target. It stops Prometheus when t ends, and logs its
// log if t failed.
func startPrometheus(ctx context.Context, t *testing.T, prometheus string, jobs map[string]string) promAPI {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(filepath.Join(repoRoot, promDir, "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
`, rules)
	for job, target := range jobs {
		config += fmt.Sprintf(`  - job_name: %s
    static_configs:
      - targets: [%q]
`, job, target)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := freeAddr(t)
	var promLog lockedBuffer
	prom := command(ctx, prometheus, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+promAddr)
	prom.Dir, prom.Stdout, prom.Stderr = dir, &promLog, &promLog
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		prom.Cancel()
		prom.Wait()
		if t.Failed() {
			log := promLog.String()
			if len(log) > 4000 {
				log = "..." + log[len(log)-4000:]
			}
			t.Logf("Prometheus's log:\n%s", log)
		}
	})
	p := promAPI{t: t, base: "http://" + promAddr}
	waitFor(t, 30*time.Second, func() string {
		s, err := p.query(`up`)
		if err != nil {
			return "Prometheus is not ready: " + err.Error()
		}
		up := byLabel(s, "job")
		for job := range jobs {
			if up[job] != 1 {
				return fmt.Sprintf("Prometheus has not scraped %s yet: up is %v", job, s)
			}
		}
		return ""
	})
	return p
}

// orDefault returns s, or fallback if s is empty.
func orDefault(s, fallback string) string {
	if s != "" {
		return s
	}
	return fallback
}

// checkRulesEvaluated checks that Prometheus loaded every rule of
// rules.yml and evaluated each without error, and that every recording
// rule whose inputs the demo exports has recorded a series.
func checkRulesEvaluated(t *testing.T, p promAPI) {
	t.Helper()
	f := loadRules(t)
	var data struct {
		Groups []struct {
			Rules []struct {
				Name       string `json:"name"`
				Health     string `json:"health"`
				LastError  string `json:"lastError"`
				Type       string `json:"type"`
				Evaluation string `json:"lastEvaluation"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get("/api/v1/rules", nil, &data); err != nil {
		t.Fatal(err)
	}
	loaded := map[string]string{}
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			loaded[r.Name] = r.Health + " " + r.LastError
		}
	}
	for _, r := range f.rules() {
		name := r.Record + r.Alert
		if h, ok := loaded[name]; !ok {
			t.Errorf("Prometheus did not load the rule %s", name)
		} else if h != "ok " {
			t.Errorf("Prometheus evaluated the rule %s: %s", name, h)
		}
	}
	for _, r := range f.rules() {
		if r.Record == "" {
			continue
		}
		fed := true
		for _, name := range alertReads(f, r.Expr) {
			if s, err := p.query(`count(` + name + `{job="payments"})`); err != nil || len(s) == 0 {
				fed = false
			}
		}
		if !fed {
			continue // the demo exports none of it: no memory store, no long handlers
		}
		if s := p.mustQuery(r.Record + `{job="payments"}`); len(s) == 0 {
			t.Errorf("the recording rule %s recorded nothing from the demo's metrics", r.Record)
		}
	}
}

// photographGraph saves Prometheus's graph of graphQuery over the last
// span as a PNG at path, once Chromium's rendering of the page is seen to
// hold a legend entry for each of the storm's decisions.
func photographGraph(ctx context.Context, t *testing.T, chromium, base string, span time.Duration, path string) {
	t.Helper()
	page := base + "/graph?" + url.Values{
		"g0.expr":        {graphQuery},
		"g0.tab":         {"0"},
		"g0.stacked":     {"0"},
		"g0.range_input": {fmt.Sprintf("%ds", int(span.Seconds()+1))},
		"g0.step_input":  {"1"},
	}.Encode()
	const width, height = 1100, 900
	run := func(what ...string) []byte {
		t.Helper()
		args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
			"--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
			"--user-data-dir=" + t.TempDir(), fmt.Sprintf("--window-size=%d,%d", width, height),
			// Virtual time runs until the page's queries are answered
			// and drawn, or 10 s of it have passed.
			"--virtual-time-budget=10000"}, what...)
		var stdout, stderr bytes.Buffer
		cmd := command(ctx, chromium, append(args, page)...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = t.TempDir(), &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", what, err, stderr.String())
		}
		return stdout.Bytes()
	}
	dom := string(run("--dump-dom"))
	for _, event := range []string{"first", "replay", "conflict"} {
		if !strings.Contains(dom, `idemkit_event="`+event+`"`) {
			t.Fatalf("Prometheus's graph page shows no series of %s decisions:\n%s", event, dom)
		}
	}
	run("--screenshot=" + path)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() != width || b.Dy() != height {
		t.Errorf("%s is %dx%d, want %dx%d", path, b.Dx(), b.Dy(), width, height)
	}
	t.Logf("Prometheus's graph: %s", path)
}

// TestOperationsDescribesTheStormPicture: the words under the picture
// give the storm's figures.
func TestOperationsDescribesTheStormPicture(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("%s charges from %d clients", thousands(stormCharges), stormClients),
		fmt.Sprintf("then %d refunds of them", stormRefunds),
		fmt.Sprintf("%d%% of the payment provider's calls failing", stormProviderFailure),
		"img/metrics.png",
	} {
		if !strings.Contains(string(src), want) {
			t.Errorf("operations.md does not say %q", want)
		}
	}
	for _, problem := range rulesCatalog(t).check(graphQuery) {
		t.Errorf("the picture's query: %s", problem)
	}
}
