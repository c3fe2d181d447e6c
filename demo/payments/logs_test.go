package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idemkit/demo/payments/internal/app"
	"github.com/idemkit/idemkit/demo/payments/internal/redisserver"
	"github.com/idemkit/idemkit/demo/payments/internal/server"
)

// logBuffer collects a demo's log lines, at every level, from the
// goroutines of all its requests.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// text is everything written so far.
func (l *logBuffer) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// logger logs to l from level DEBUG up, as slog's text handler writes.
func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lines returns the lines logged so far that contain every one of parts.
func (l *logBuffer) lines(parts ...string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var found []string
	for line := range strings.Lines(l.buf.String()) {
		matches := true
		for _, p := range parts {
			matches = matches && strings.Contains(line, p)
		}
		if matches {
			found = append(found, strings.TrimSuffix(line, "\n"))
		}
	}
	return found
}

// waitFor waits until n lines containing parts are logged, and returns
// them: a request's line may come after its answer.
func (l *logBuffer) waitFor(t *testing.T, n int, parts ...string) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lines := l.lines(parts...)
		if len(lines) >= n {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d lines with %q logged, want %d:\n%s", len(lines), parts, n, strings.Join(l.lines(), "\n"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestScrapesAreLoggedAtDebug: a Prometheus scrape of /metrics (and a
// health probe of /healthz) comes every few seconds, so its request line
// is logged at DEBUG, never at INFO, on every framework and on the admin
// listener; the API's requests still are logged at INFO.
func TestScrapesAreLoggedAtDebug(t *testing.T) {
	check := func(t *testing.T, logs *logBuffer, api, admin *demo) {
		t.Helper()
		for range 3 {
			for _, path := range []string{"/metrics", "/healthz"} {
				if r := admin.do(t, http.MethodGet, path, "", "", ""); r.status != 200 {
					t.Fatalf("GET %s: %d", path, r.status)
				}
			}
		}
		acct := newAccount()
		api.balance(t, acct)
		for _, path := range []string{"/metrics", "/healthz"} {
			for _, line := range logs.waitFor(t, 3, "msg=request", "path="+path+" ") {
				if !strings.Contains(line, "level=DEBUG") {
					t.Errorf("GET %s logged above DEBUG: %s", path, line)
				}
			}
		}
		if line := logs.waitFor(t, 1, "msg=request", "path=/v1/balance ")[0]; !strings.Contains(line, "level=INFO") {
			t.Errorf("an API request is no longer logged at INFO: %s", line)
		}
	}
	for _, fw := range server.Frameworks {
		t.Run(fw, func(t *testing.T) {
			var logs logBuffer
			cfg := app.DefaultConfig()
			cfg.Framework, cfg.DB = fw, filepath.Join(t.TempDir(), "p.db")
			d := startLogged(t, cfg, logs.logger())
			check(t, &logs, d, d)
		})
	}
	t.Run("admin", func(t *testing.T) {
		var logs logBuffer
		cfg := app.DefaultConfig()
		cfg.DB, cfg.AdminAddr = filepath.Join(t.TempDir(), "p.db"), "127.0.0.1:0"
		s := serveLogged(t, cfg, logs.logger())
		check(t, &logs, &s.demo, &demo{url: s.admin, app: s.app})
	})
}

// clientGoneLog is what the demo logs for a request it abandons because
// its client went away.
const clientGoneLog = "the client closed the connection"

// TestClientHangingUpIsNoError: a client that closes its connection right
// after sending a charge has gone, and its charge with it; that is no
// failure of the demo's. Of 50 such charges, half closed at once and half
// once the payment provider has them, none is answered 500 or logs an
// error of the demo's, on any framework; each that the demo abandons for
// it is logged once, at INFO, as such.
func TestClientHangingUpIsNoError(t *testing.T) {
	const n = 50
	for _, fw := range server.Frameworks {
		t.Run(fw, func(t *testing.T) {
			var logs logBuffer
			cfg := app.DefaultConfig()
			cfg.Framework, cfg.DB, cfg.ProviderLatency = fw, filepath.Join(t.TempDir(), "p.db"), 500*time.Millisecond
			d := startLogged(t, cfg, logs.logger())
			host := strings.TrimPrefix(d.url, "http://")
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					conn, err := net.Dial("tcp", host)
					if err != nil {
						t.Error(err)
						return
					}
					defer conn.Close()
					acct := newAccount()
					_, err = fmt.Fprintf(conn, "POST /v1/charges HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nIdempotency-Key: %s\r\n"+
						"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", host, acct, newKey(), len(chargeBody), chargeBody)
					if err != nil {
						t.Error(err)
						return
					}
					if i%2 == 0 {
						return
					}
					for deadline := time.Now().Add(10 * time.Second); d.app.Provider.Counts(acct).Calls == 0; time.Sleep(time.Millisecond) {
						if time.Now().After(deadline) {
							t.Error("a charge never reached the provider")
							return
						}
					}
				})
			}
			wg.Wait()
			logs.waitFor(t, n, "msg=request", "method=POST", "path=/v1/charges ")
			for _, line := range logs.lines() {
				// idemkit's own report of a key it could not take for a
				// client already gone is the library's, not the demo's.
				library := strings.Contains(line, "msg=idempotency event=store-error ")
				if strings.Contains(line, "status=500") || (strings.Contains(line, "level=ERROR") && !library) {
					t.Errorf("logged: %s", line)
				}
			}
			gone := logs.lines(clientGoneLog)
			for _, line := range gone {
				if !strings.Contains(line, "level=INFO") && !strings.Contains(line, "level=DEBUG") {
					t.Errorf("logged above INFO: %s", line)
				}
			}
			// Fiber's servers (v2 and v3, both on fasthttp) never tell a
			// handler that its client has gone: there the charges simply run
			// to their end.
			if len(gone) > n || (!strings.HasPrefix(fw, "fiber") && len(gone) < n/2) {
				t.Errorf("%d requests logged as abandoned by their client, want one line for each of the %d to %d that were", len(gone), n/2, n)
			}
		})
	}
}

// TestRedisOutageLogsFewLines: while the Redis that keeps the records is
// down, every charge gets its 503 and its event, but the log gets a few
// lines, not one per request: idemkit holds its store errors to one line a
// minute, and the Redis client library's own message for every failed
// dial goes to DEBUG, which the demo does not print by default. (The
// access log's line per request is the demo's, at INFO.)
func TestRedisOutageLogsFewLines(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("%v; `make test` installs it through scripts/redis-servers.sh", redisserver.ErrNotInstalled)
	}
	rs, err := redisserver.Start(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Stop()
	in := startInstance(t, "-db", filepath.Join(t.TempDir(), "outage.db"), "-records", rs.URL())
	rs.Kill()
	acct := newAccount()
	const charges = 30
	for i := range charges {
		req, _ := http.NewRequest(http.MethodPost, in.base+"/v1/charges",
			strings.NewReader(`{"amount":1000,"currency":"usd","customer":"cus_1"}`))
		req.Header.Set("Authorization", "Bearer "+acct)
		req.Header.Set("Idempotency-Key", fmt.Sprintf("outage-%d", i))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("charge %d with the records' store down: %d, want 503", i, resp.StatusCode)
		}
	}
	text := in.logs.text()
	if strings.Contains(text, "redis: ") || strings.Contains(text, "connection refused") && !strings.Contains(text, "level=ERROR") {
		t.Errorf("the Redis client library wrote to the log by itself:\n%s", text)
	}
	// Besides the access log's line per request, which the demo writes at
	// INFO by design: its start, and one line of trouble.
	var other []string
	for line := range strings.Lines(text) {
		if !strings.Contains(line, "msg=request ") {
			other = append(other, line)
		}
	}
	if len(other) > 3 {
		t.Errorf("%d log lines beside the requests' for %d refused charges, want a few:\n%s", len(other), charges, strings.Join(other, ""))
	}
}
