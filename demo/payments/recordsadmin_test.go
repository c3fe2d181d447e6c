package main

import (
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/server"
)

// chargeOnce charges acct once with key, and returns the request that
// retries it.
func chargeOnce(t *testing.T, s *serving, acct, key string) func() reply {
	t.Helper()
	if r := s.do(t, http.MethodPost, "/v1/charges", acct, key, chargeBody); r.status != 201 {
		t.Fatalf("charge: %d %s", r.status, r.body)
	}
	return func() reply { return s.do(t, http.MethodPost, "/v1/charges", acct, key, chargeBody) }
}

// stillOnce fails t unless the retry is replayed and the provider took
// the money once.
func stillOnce(t *testing.T, s *serving, acct string, retry func() reply, after string) {
	t.Helper()
	if r := retry(); r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after %s, the retry answered %d replayed=%q %s: the record was forgotten", after, r.status,
			r.header.Get("Idempotent-Replayed"), r.body)
	}
	if c := s.provider(t, acct); c["authorizations"] != 1.0 {
		t.Fatalf("after %s, the provider authorized %v charges, want 1", after, c["authorizations"])
	}
}

// forgetRequest is the forget of acct's key, as curl sends it.
func forgetRequest(t *testing.T, url, acct, key string) *http.Request {
	t.Helper()
	body := fmt.Sprintf(`{"scope":%q,"key":%q}`, acct, strings.Trim(key, `"`))
	r, err := http.NewRequest(http.MethodPost, url+server.RecordsAdminPath+"/forget", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Content-Type", "application/json")
	return r
}

func send(t *testing.T, r *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// nonLoopbackAddr returns an address of this machine that is not a
// loopback one, or "" if it has none.
func nonLoopbackAddr() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}

// Defect: with the records admin on 0.0.0.0, one request with any Host
// made the client's next retry run the charge again. Without a token the
// records admin serves loopback peers that name a loopback host, and the
// charge stays charged once; with a token, only a request carrying it
// forgets.
func TestRecordsAdminDoor(t *testing.T) {
	cfg := app.DefaultConfig()
	cfg.DB, cfg.ProviderLatency, cfg.RecordsAdminAddr = filepath.Join(t.TempDir(), "p.db"), 0, "0.0.0.0:0"
	s := serve(t, cfg)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.records, "http://"))
	acct, key := newAccount(), newKey()
	retry := chargeOnce(t, s, acct, key)

	r := forgetRequest(t, "http://127.0.0.1:"+port, acct, key)
	r.Host = "payments.example.com"
	if code := send(t, r); code != http.StatusForbidden {
		t.Errorf("forget with Host %s: %d, want 403", r.Host, code)
	}
	stillOnce(t, s, acct, retry, "a forget naming another host")
	if ip := nonLoopbackAddr(); ip != "" {
		if code := send(t, forgetRequest(t, "http://"+net.JoinHostPort(ip, port), acct, key)); code != http.StatusForbidden {
			t.Errorf("forget from %s: %d, want 403", ip, code)
		}
		stillOnce(t, s, acct, retry, "a forget from "+ip)
	}
	if code := send(t, forgetRequest(t, "http://127.0.0.1:"+port, acct, key)); code != http.StatusOK {
		t.Fatalf("forget from loopback: %d", code)
	}
	if r := retry(); r.status != 201 || r.header.Get("Idempotent-Replayed") == "true" {
		t.Fatalf("the retry after the forget answered %d replayed=%q, want the charge run anew", r.status, r.header.Get("Idempotent-Replayed"))
	}

	const token = "0123456789abcdef-records"
	cfg.RecordsAdminToken = token
	cfg.DB = filepath.Join(t.TempDir(), "p.db")
	s = serve(t, cfg)
	_, port, _ = net.SplitHostPort(strings.TrimPrefix(s.records, "http://"))
	retry = chargeOnce(t, s, acct, key)
	for _, auth := range []string{"", "Bearer not-the-token-at-all"} {
		r := forgetRequest(t, "http://127.0.0.1:"+port, acct, key)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		if code := send(t, r); code != http.StatusUnauthorized {
			t.Errorf("forget with Authorization %q: %d, want 401", auth, code)
		}
	}
	stillOnce(t, s, acct, retry, "forgets without the token")
	r = forgetRequest(t, "http://127.0.0.1:"+port, acct, key)
	r.Host = "payments.example.com"
	r.Header.Set("Authorization", "Bearer "+token)
	if code := send(t, r); code != http.StatusOK {
		t.Fatalf("forget with the token: %d", code)
	}
}

// attackPage is a page of another origin that tries every way a page can
// send a request without the user's help: a text/plain form (no
// preflight: its body made a JSON object of the form's field), a no-cors
// fetch, a beacon, and a fetch of application/json (preflighted). When
// all have settled it sets the title to "done".
var attackPage = template.Must(template.New("").Parse(`<!doctype html>
<title>attack</title>
<iframe name="sink" id="sink"></iframe>
<form id="f" method="POST" enctype="text/plain" target="sink" action="{{.Forget}}">
<input type="hidden" name='{"scope":"x' value='","scope":{{.Scope}},"key":{{.Key}}}'>
</form>
<script>
const body = JSON.stringify({scope: {{.Scope}}, key: {{.Key}}});
const formSent = new Promise((resolve) => {
	document.getElementById("sink").addEventListener("load", resolve, {once: true});
	setTimeout(resolve, 3000);
});
document.getElementById("f").submit();
const tries = [
	formSent,
	fetch({{.Forget}}, {method: "POST", mode: "no-cors", headers: {"Content-Type": "text/plain"}, body}).catch(() => {}),
	fetch({{.Forget}}, {method: "POST", headers: {"Content-Type": "application/json"}, body}).catch(() => {}),
	Promise.resolve(navigator.sendBeacon({{.Forget}}, new Blob([body], {type: "text/plain"}))),
];
Promise.allSettled(tries).then(() => setTimeout(() => { document.title = "done"; }, 500));
</script>`))

// TestCrossOriginPageCannotForget: in a real browser, a page of another
// origin that posts a forget to the records admin, by form, fetch and
// beacon, forgets nothing: the charge's retry is still replayed, and the
// records admin saw the requests and refused them.
func TestCrossOriginPageCannotForget(t *testing.T) {
	var logs logBuffer
	cfg := app.DefaultConfig()
	cfg.DB, cfg.ProviderLatency, cfg.RecordsAdminAddr = filepath.Join(t.TempDir(), "p.db"), 0, "127.0.0.1:0"
	s := serveLogged(t, cfg, logs.logger())
	acct, key := newAccount(), newKey()
	retry := chargeOnce(t, s, acct, key)

	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		attackPage.Execute(w, map[string]string{"Forget": s.records + server.RecordsAdminPath + "/forget",
			"Scope": acct, "Key": strings.Trim(key, `"`)})
	}))
	defer attacker.Close()
	page := strings.Replace(attacker.URL, "127.0.0.1", "localhost", 1) // another origin than the records admin's
	ctx := browser(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(page), void(chromedp.Poll[bool](`document.title === "done"`,
		chromedp.WithPollingTimeout(20*time.Second)))); err != nil {
		t.Fatalf("the attack page: %v\n%s", err, logs.text())
	}
	stillOnce(t, s, acct, retry, "the page's requests")
	posts := logs.lines("framework=records-admin", "method=POST", "path="+server.RecordsAdminPath+"/forget")
	if len(posts) < 2 {
		t.Fatalf("the records admin saw %d of the page's POSTs, want the form's and the no-cors fetch's at least: "+
			"the browser did not send them, so the test shows nothing:\n%s", len(posts), logs.text())
	}
	for _, line := range posts {
		if !strings.Contains(line, "status=403") && !strings.Contains(line, "status=415") {
			t.Errorf("a page's forget was not refused: %s", line)
		}
	}
	if testing.Verbose() {
		t.Logf("the records admin's answers to the page:\n%s", strings.Join(logs.lines("framework=records-admin"), "\n"))
	}
}

// TestRecordsAdminTokenFlags: the token comes from the file of
// -records-admin-token-file or from PAYMENTS_RECORDS_ADMIN_TOKEN, never
// from a flag of its own; a short one, or both at once, is refused.
func TestRecordsAdminTokenFlags(t *testing.T) {
	const token = "0123456789abcdef0123"
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cfg, err := parseFlags([]string{"-records-admin-token-file", file}, io.Discard); err != nil || cfg.RecordsAdminToken != token {
		t.Errorf("from the file: %q, %v", cfg.RecordsAdminToken, err)
	}
	if _, err := parseFlags([]string{"-records-admin-token", token}, io.Discard); err == nil {
		t.Error("a -records-admin-token flag was taken: the process list would show the token")
	}
	t.Setenv(recordsAdminTokenEnv, token)
	if cfg, err := parseFlags(nil, io.Discard); err != nil || cfg.RecordsAdminToken != token {
		t.Errorf("from %s: %q, %v", recordsAdminTokenEnv, cfg.RecordsAdminToken, err)
	}
	if _, err := parseFlags([]string{"-records-admin-token-file", file}, io.Discard); err == nil {
		t.Error("a token from both the file and the environment was taken")
	}
	t.Setenv(recordsAdminTokenEnv, "short")
	if _, err := parseFlags(nil, io.Discard); err == nil || strings.Contains(err.Error(), "short") {
		t.Errorf("a 5-character token: %v; want it refused, without showing it", err)
	}
}

// Defect: nothing was logged when the records admin bound beyond
// loopback. The demo warns, and says whether it has a token.
func TestRecordsAdminBeyondLoopbackIsLogged(t *testing.T) {
	exe := binary(t)
	for _, tc := range []struct {
		addr, env, want string
	}{
		{"0.0.0.0:0", "", "without a token"},
		{"0.0.0.0:0", recordsAdminTokenEnv + "=0123456789abcdef0123", "any peer with its token"},
		{"127.0.0.1:0", "", ""},
	} {
		var logs logBuffer
		cmd := exec.Command(exe, "-addr", "127.0.0.1:0", "-records-admin-addr", tc.addr, "-settle-every", "0")
		cmd.Dir, cmd.Stderr = t.TempDir(), &logs
		if tc.env != "" {
			cmd.Env = append(os.Environ(), tc.env)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); len(logs.lines("payments demo listening")) == 0; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("the demo did not start:\n%s", logs.text())
			}
		}
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		warned := logs.lines("level=WARN", "records admin listens beyond loopback")
		switch {
		case tc.want == "" && len(warned) != 0:
			t.Errorf("-records-admin-addr %s: a warning: %v", tc.addr, warned)
		case tc.want != "" && (len(warned) != 1 || !strings.Contains(warned[0], tc.want)):
			t.Errorf("-records-admin-addr %s (%s): %v; want one warning saying %q:\n%s", tc.addr, tc.env, warned, tc.want, logs.text())
		}
	}
}
