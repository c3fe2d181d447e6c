package examples_test

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	idem "github.com/idemkit/idemkit/core"
	"github.com/idemkit/idemkit/core/idemadmin"
	"github.com/idemkit/idemkit/core/idemtest"
)

// alertState returns the state (pending, firing) of the alerts of name
// whose labels include want, or "" if there is none.
func alertState(p promAPI, name string, want map[string]string) (string, error) {
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := p.get("/api/v1/alerts", nil, &data); err != nil {
		return "", err
	}
	for _, a := range data.Alerts {
		match := a.Labels["alertname"] == name
		for k, v := range want {
			match = match && a.Labels[k] == v
		}
		if match {
			return a.State, nil
		}
	}
	return "", nil
}

// charge posts a charge of acct with key to the demo at api, giving up
// after timeout (0: never).
func charge(api, acct, key string, timeout time.Duration) error {
	req, err := http.NewRequest(http.MethodPost, "http://"+api+"/v1/charges",
		strings.NewReader(`{"amount":1999,"currency":"usd","customer":"cus_1"}`))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+acct)
	req.Header.Set("Idempotency-Key", `"`+key+`"`)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// TestPrometheusPagesTheFirstEvent runs the rules of
// observability/prometheus on a real Prometheus scraping two demos, and
// sees the pages fire for the first event of a process:
//
//   - payments: an operator force-forgets a charge while it runs
//     (idemctl forget -force, through the records admin): the charge's
//     completion finds its key gone, the first lock-lost of the process,
//     and IdemkitLeaseLost fires. Before the fix its series appeared at
//     1, and rate() saw nothing.
//   - frozen: the demo's records are in a Redis that never answers, and
//     clients give up after a second, long before the 5 s StoreTimeout:
//     its requests are store errors, not client-gone, and
//     IdemkitStoreUnavailable goes pending (it fires after 3 minutes).
func TestPrometheusPagesTheFirstEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("-short skips it: it starts Prometheus and two demos (make test runs it)")
	}
	prometheus := lookPath(t, "prometheus", "prometheus", "the rules are run by a real Prometheus")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin+string(filepath.Separator), "./demo/payments")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the demo: %v\n%s", err, out)
	}
	demo := filepath.Join(bin, "payments")

	api, admin, records := freeAddr(t), freeAddr(t), freeAddr(t)
	startProgram(t, demo, []string{"-addr", api, "-admin-addr", admin, "-records-admin-addr", records,
		"-db", "payments.db", "-provider-latency", "3s", "-settle-every", "0"}, nil, records)
	frozenAPI, frozenAdmin := freeAddr(t), freeAddr(t)
	startProgram(t, demo, []string{"-addr", frozenAPI, "-admin-addr", frozenAdmin, "-records", "redis://" + idemtest.SilentServer(t) + "/0",
		"-db", "payments.db", "-settle-every", "0"}, nil, frozenAdmin)
	p := startPrometheus(ctx, t, prometheus, map[string]string{"payments": admin, "frozen": frozenAdmin})

	// The forced forget of a charge in flight.
	acct, key := "acct_pages", "order-forced"
	answered := make(chan error, 1)
	go func() { answered <- charge(api, acct, key, 0) }()
	admins := idemadmin.NewClient("http://"+records+"/idemadmin", "", nil)
	id := idem.ID{Scope: acct, Key: key}
	waitFor(t, 20*time.Second, func() string {
		in, err := admins.Inspect(ctx, id)
		if err != nil || in.State != "in-flight" {
			return fmt.Sprintf("the charge is not in flight: %+v, %v", in, err)
		}
		return ""
	})
	if err := admins.Forget(ctx, id, true); err != nil {
		t.Fatalf("forget -force: %v", err)
	}
	// Its completion finds the key gone: the demo's transaction is rolled
	// back with it, and the client sees its connection broken (and retries).
	t.Logf("the charge whose key was forgotten: %v", <-answered)
	waitFor(t, 60*time.Second, func() string {
		state, err := alertState(p, "IdemkitLeaseLost", map[string]string{"job": "payments", "idemkit_event": "not-stored",
			"idemkit_reason": "lock-lost"})
		if err != nil || state != "firing" {
			s, _ := p.query(`idemkit_handler_outcomes_total{job="payments",idemkit_event="not-stored"}`)
			return fmt.Sprintf("IdemkitLeaseLost is %q (%v) after the forced forget; the outcomes: %v", state, err, s)
		}
		return ""
	})

	// A frozen store behind impatient clients.
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { charge(frozenAPI, "acct_frozen", fmt.Sprint("frozen-", i), time.Second) })
	}
	wg.Wait()
	waitFor(t, 60*time.Second, func() string {
		state, err := alertState(p, "IdemkitStoreUnavailable", map[string]string{"job": "frozen", "idemkit_event": "store-error"})
		if err != nil || state == "" {
			s, _ := p.query(`idemkit_decisions_total{job="frozen"} > 0`)
			return fmt.Sprintf("IdemkitStoreUnavailable is %q (%v) with the store frozen; the decisions: %v", state, err, s)
		}
		return ""
	})
	if s := p.mustQuery(`idemkit_decisions_total{job="frozen",idemkit_event="client-gone"} > 0`); len(s) != 0 {
		t.Errorf("requests of the frozen store counted as client-gone: %v", s)
	}
}
